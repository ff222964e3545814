"""Hardware profiles: the schema, the stored profiles (`profiles/data/*.json`) and their
loader. A profile says what the device can do (peaks, GEMM/attention efficiency, memory
bandwidth) apart from how the cluster is wired (collective latency and bandwidth per group
size and placement, topology)."""
