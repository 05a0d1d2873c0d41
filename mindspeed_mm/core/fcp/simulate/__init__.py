"""Workloads, strategy simulator, reports and plots of FCP plans."""
