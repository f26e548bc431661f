"""Throughput: measured profile tables, curves for policies, and (later) the analytic estimator."""
