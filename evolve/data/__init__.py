"""Framework data shipped inside the package: the strategy schema, the trace contract, the baseline strategy, the planner's bundle
table, the framework prompts and the report's style sheet. Read through :mod:`importlib.resources`, so an installed wheel finds them."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

#: The package's data folder (a directory on disk for every regular or editable install; zip imports unsupported).
DATA = Path(str(files(__name__)))
SCHEMA_PATH = DATA / "strategy.schema.json"
TRACE_SCHEMA_PATH = DATA / "trace.schema.json"
BASELINE_PATH = DATA / "baseline.yaml"
#: The replay referee's reference lifecycle (every mechanism on), versioned apart from any compared strategy.
REFEREE_PATH = DATA / "referee.yaml"
BUNDLES_PATH = DATA / "bundles.yaml"
#: The image knowledge base's categories and their synonyms (:mod:`evolve.runtime.ikb`).
IMAGE_CATEGORIES_PATH = DATA / "image_categories.yaml"
PROMPTS_DIR = DATA / "prompts"
REPORT_CSS_PATH = DATA / "report.css"
