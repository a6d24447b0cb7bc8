"""Improve: turn traces into symptoms, plan schema-bounded moves, and pick concrete values with Optuna."""
