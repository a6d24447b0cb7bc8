"""The round loop: run configuration, the engine that orders a round, and MLflow tracking."""
