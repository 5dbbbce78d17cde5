"""SSO compaction: the pure plan (plan.py) and the Spark job that carries it out."""
