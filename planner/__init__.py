"""Plan search: constraint-aware generators of candidate plans, screening and ranking by
the cost model, cluster sizing, and export to Megatron-LM and torchtitan."""
