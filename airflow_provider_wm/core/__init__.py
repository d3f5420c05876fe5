"""Pure semantics of the seeds: no airflow, no pyspark. Each rule is written once, here."""
