"""Workloads: datasets, arrival schedule and the streaming client."""
