"""Predicted versus measured: timeline alignment, error tables, the HTML report and
calibration of a hardware profile from measured residuals."""
