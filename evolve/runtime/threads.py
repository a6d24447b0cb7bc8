"""One BLAS thread for the runtime's small matrix products."""
from __future__ import annotations

from threadpoolctl import threadpool_limits


def single_blas_thread() -> None:
    """Limit the BLAS libraries loaded in this process (numpy's OpenBLAS) to one thread (about 1 ms).

    The runtime's products are small (a store's item vectors, a few thousand rows, times one query vector), and
    OpenBLAS splits a product over threads above a few hundred thousand multiply-adds: on a shared machine the
    threads cost 10-100x the product itself (7-23 ms instead of 0.2 ms on the largest dev4 turn store), and the
    split changes the last bit of a score with the machine's core count.
    """
    threadpool_limits(limits=1, user_api="blas")
