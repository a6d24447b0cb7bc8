"""The locked memory runtime: ingestion into layered memory, hybrid retrieval, lifecycle filtering,
budgeted context assembly and answering, all driven by one strategy."""
from evolve.runtime.answerer import ExtractiveAnswerer
from evolve.runtime.cache import EmbeddingCache, IngestionCache
from evolve.runtime.embedder import Embedder, SentenceTransformerEmbedder, default_embedder
from evolve.runtime.expander import RuleExpander, classify_intent
from evolve.runtime.extractor import RuleExtractor
from evolve.runtime.retrieval import Hit
from evolve.runtime.runtime import MemoryRuntime, RuntimeResult
from evolve.runtime.store import MemoryItem, MemoryStore

__all__ = [
    "EmbeddingCache", "Embedder", "ExtractiveAnswerer", "Hit", "IngestionCache", "MemoryItem", "MemoryRuntime",
    "MemoryStore", "RuleExpander", "RuleExtractor", "RuntimeResult", "SentenceTransformerEmbedder",
    "classify_intent", "default_embedder",
]
