"""The eval grid past one process: ``torchrun --nproc_per_node N -m attnlab eval …`` shares the prompts by rank.

    rank r of N answers the prompts x of each length with index(x) mod N = r (grid order), every (method, β) of them,
    and writes its rows to OUT/results.rank{r}.jsonl (one process: OUT/results.jsonl); the perplexity rows are rank 0's.
    done = the keys of every results file of OUT: a killed run resumes with any N, no row measured twice.
    merge: after a barrier, rank 0 folds the rank files into OUT/results.jsonl (the union, by key) and writes the table.

RANK and WORLD_SIZE come from the environment (torchrun sets them; LOCAL_RANK picks the GPU, ``models.device``).
The barrier is ``torch.distributed``'s when a process group is initialised (``init_group`` starts a gloo group under
torchrun, whose MASTER_ADDR / MASTER_PORT it reads); without one (the variables set by hand) each rank only writes
its file, and the next run in the folder (any N) folds them and writes the table.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError

__all__ = ["Ranks", "fold_results", "read_all", "result_files", "says_errors"]


def says_errors(environ=None) -> bool:
    """Does this process print a refusal: one process, or rank 0 of ``torchrun``'s (every rank runs the same checks
    on the same options before ``torch.distributed`` starts, so each would say the same line; the others exit 2 in
    silence).  RANK that is not an integer: every process speaks (its own error says why)."""
    rank = (os.environ if environ is None else environ).get("RANK", "0").strip()
    return not rank.isascii() or not rank.isdigit() or int(rank) == 0


@dataclass(frozen=True)
class Ranks:
    """This process's rank among ``world`` processes sharing one eval grid."""

    rank: int = 0
    world: int = 1

    @classmethod
    def from_env(cls) -> "Ranks":
        """RANK and WORLD_SIZE of the environment (absent: one process); bad values: one-line ``UserError``."""
        try:
            rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        except ValueError:
            raise UserError(f"RANK={os.environ.get('RANK')!r}, WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}: "
                            f"expected integers "
                            f"(torchrun sets them)") from None
        if world < 1 or not 0 <= rank < world:
            raise UserError(f"RANK={rank}, WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        return cls(rank, world)

    def results_path(self, out: Path) -> Path:
        """This rank's results file: OUT/results.jsonl for one process, OUT/results.rank{r}.jsonl for several."""
        return out / ("results.jsonl" if self.world == 1 else f"results.rank{self.rank}.jsonl")

    def mine(self, index: int) -> bool:
        """Is the prompt at ``index`` (grid order) this rank's?"""
        return index % self.world == self.rank

    def label(self, what: str) -> str:
        """``what`` for one process, ``what (rank r of N)`` for several (a progress bar's name)."""
        return what if self.world == 1 else f"{what} (rank {self.rank} of {self.world})"

    def grouped(self) -> bool:
        """Is a torch.distributed process group running (a barrier possible)?"""
        import torch.distributed as dist

        return self.world > 1 and dist.is_available() and dist.is_initialized()

    def init_group(self) -> None:
        """Under torchrun (MASTER_ADDR set) with N > 1: start a gloo group for the barrier before the merge."""
        import torch.distributed as dist

        if self.world > 1 and "MASTER_ADDR" in os.environ and dist.is_available() and not dist.is_initialized():
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world)

    def barrier(self) -> None:
        if self.grouped():
            import torch.distributed as dist

            dist.barrier()

    def merges(self) -> bool:
        """Does this process fold the rank files and write the table (one process, or rank 0 after the barrier)?"""
        return self.world == 1 or (self.rank == 0 and self.grouped())

    def close(self) -> None:
        if self.grouped():
            import torch.distributed as dist

            dist.destroy_process_group()


def result_files(out: Path) -> list[Path]:
    """OUT/results.jsonl (if any), then every OUT/results.rank{r}.jsonl by rank."""
    ranked = sorted(out.glob("results.rank*.jsonl"), key=lambda p: int(p.name[len("results.rank"):-len(".jsonl")] or 0))
    return [p for p in [out / "results.jsonl"] if p.exists()] + ranked


def read_all(out: Path) -> list[dict]:
    """The rows of every results file of OUT, each key once (the first seen), in file order."""
    from attnlab.llm.eval.results_file import read_results

    rows, seen = [], set()
    for path in result_files(out):
        for row in read_results(path):
            if row["key"] not in seen:
                seen.add(row["key"])
                rows.append(row)
    return rows


def fold_results(out: Path) -> list[dict]:
    """Fold the rank files into OUT/results.jsonl (the union by key, rewritten atomically), then remove them; every
    row."""
    rows = read_all(out)
    ranked = [p for p in result_files(out) if p.name != "results.jsonl"]
    if ranked:
        write_text_atomic(out / "results.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        for p in ranked:
            p.unlink()
    return rows
