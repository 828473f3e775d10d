"""MLflow: the driver opens and closes a run; rank 0 logs its metrics and artifacts."""
