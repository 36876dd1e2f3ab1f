"""Exact-in-effect L2 nearest-neighbour search over an embedding table (T2T decoding).

Releasing the nearest row of a noisy embedding is post-processing, so any search keeps the dχ
guarantee; we still promise the outputs of *exact* search. Per block of queries, with
``argmin ‖q−e‖² = argmax s(e)``, ``s(e) = q·e − ‖e‖²/2``:

1. **Screen.** One bfloat16 product ``ẽ @ q̃ᵀ`` scores every row. Rows are stored sorted by ``‖e‖``
   in groups of ``_GROUP``, so each group's bias ``−‖e‖²/2`` is nearly constant and is added per
   group (its largest value) to the group maxima: the product stays d wide (a bias column would
   cost ~25 % on AMX) and the reduction is one ``amax``.
2. **Candidates.** The best groups are gathered, their rows scored with their own bias, and the
   top ``candidates`` rows re-ranked exactly (float32 products with a proven error bound; float64
   for close calls); ties go to the lowest row, as with numpy's ``argmin``.
3. **Certificate.** The screen error of any row is at most ``‖q̃‖·max‖ẽ−e‖ + ‖q̃−q‖·max‖e‖``
   (rounding of e and q; Cauchy–Schwarz) ``+ γ·‖q̃‖·max‖ẽ‖`` (float32 accumulation); the output
   rounding is undone by rounding screened values *up* (``x + u|x|/(1−u)``, ``u`` = 2⁻⁸; rounding
   is monotone, so this bounds the unrounded sum). Every row not re-ranked thus has
   ``s(e) ≤ T + slack``, ``T`` the best screened bound left out. A query is certified when its
   exact best beats that strictly: no other row can be as near, so the answer *is* exact.
4. **Fallback.** Uncertified queries (< 1 % with realistic noise) are re-run with a float32 screen
   (``u`` = 2⁻²⁴) and, if still open, by float64 brute force.

"Exact" means the ranking of :func:`~rapt_audit.mechanisms.nn_exact.exact_nearest`: float64 scores ``q·e − ‖e‖²/2``, which unlike
differences ``q − e`` stay accurate for queries far larger than the table. ``screen="float32"``
starts at step 4's float32 screen. Queries holding NaN or inf raise ``ValueError`` before any
search (``argmin`` over NaN silently returns row 0).
"""

from __future__ import annotations

import math
import sys
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from rapt_audit.mechanisms.nn_exact import Float64Search, as_matrix

if TYPE_CHECKING:  # pragma: no cover
    import torch


__all__ = ["NearestNeighbourIndex"]

_GROUP = 32  # rows per screening group
_ROW_CHUNK = 4096  # table rows per chunk in set-up loops
_SCORE_CHUNK = 1 << 20  # scores per screening product (2 MB in bfloat16): reduced while still in L2
# On a GPU, per-launch overheads dominate small products: large query blocks, each screened in one
# product (a 30k table × 4,096 queries is 250 MB of bfloat16 scores).
_BLOCK = {"cpu": 256, "cuda": 4096}
QUERY_MULTIPLE = 32  # a CPU block is screened padded to a multiple of this many queries (see _padded)
_CUDA_SCORE_CHUNK = 1 << 30
_PAD_BIAS = -1.0e30  # bias of padding rows: never a candidate, finite (no inf - inf = NaN)
_SCREENS = {"bfloat16": 2.0**-8, "float32": 2.0**-24}  # unit roundoff of each screen dtype
_HUGE = 1e30  # ‖q‖·max‖e‖ above this could overflow a screen: such queries go to float64


class NearestNeighbourIndex:
    """L2 nearest-neighbour search over a fixed table, exact in effect (see the module docstring).

    Args:
        table: ``(V, d)`` finite float table (kept as float32; it is the truth searched).
        device: Torch device for the search (``"cpu"`` or ``"cuda"``).
        screen: ``"bfloat16"`` (fast screen + certified re-rank) or ``"float32"`` (plain exact).
        candidates: Rows re-ranked exactly per query (8 certifies > 99 % of noisy MiniLM queries).
        block_size: Queries screened at once. The ``V × block_size`` score block bounds memory
            (256 queries: 15 MB in bfloat16 for a 30k vocabulary) and small blocks stay in cache.
            None: 256 on a CPU, 4,096 on a GPU (where each block is also screened in one product).
        cold_queries: Up to this many queries in all are answered by numpy's float64 search
            (:class:`~rapt_audit.mechanisms.nn_exact.Float64Search`, the same answers) before the
            torch index is built, in calls of at most that many and only while the process has
            not imported torch; 0 builds it at once. The user's side sets it, so that privatizing
            a short text does not wait 1–1.5 s for torch.

    Attributes:
        fallbacks: Queries so far that the bfloat16 screen could not certify (re-run in float32).
        brute_forced: Queries so far that needed float64 brute force.
    """

    def __init__(self, table: np.ndarray, *, device: str = "cpu", screen: str = "bfloat16",
                 candidates: int = 8, block_size: int | None = None, cold_queries: int = 0) -> None:
        cuda = str(device).startswith("cuda")
        block_size = _BLOCK["cuda" if cuda else "cpu"] if block_size is None else block_size
        self._score_chunk = _CUDA_SCORE_CHUNK if cuda else _SCORE_CHUNK
        if screen not in _SCREENS:
            raise ValueError(f"screen must be one of {sorted(_SCREENS)}, but is {screen!r}")
        if int(candidates) < 1 or int(block_size) < 1 or int(cold_queries) < 0:
            raise ValueError(f"candidates and block_size must be >= 1 and cold_queries >= 0, got {candidates}, "
                             f"{block_size} and {cold_queries}")
        self.table = np.ascontiguousarray(as_matrix("table rows", table), dtype=np.float32)
        if not self.table.flags.writeable:  # e.g. EmbeddingSpace.vectors; torch needs a writable buffer
            self.table = self.table.copy()
        if self.table.shape[0] == 0:
            raise ValueError("table must have at least one row")
        self.screen, self.candidates, self.block_size = screen, int(candidates), int(block_size)
        self.fallbacks = self.brute_forced = 0
        self.extra_groups = 4  # groups gathered beyond those needed to hold the candidates
        self.cold_queries = int(cold_queries)
        self._cold: Float64Search | None = None
        self._device_name = device
        self._built = False
        self._scratch = threading.local()  # per thread: searches from several threads never share it
        if not self.cold_queries:
            self._build()

    def _build(self) -> None:
        """The torch side of the index: the table on the device, sorted into screening groups."""
        import torch  # lazy (torch)

        self._built, self._cold = True, None  # the float64 copy of the cold start is no longer needed
        self.device = torch.device(self._device_name)
        v, d = self.table.shape
        self._table = torch.from_numpy(self.table).to(self.device)  # shares memory on CPU
        sq = np.einsum("ij,ij->i", self.table, self.table, dtype=np.float64)  # ‖e‖², exact products
        self._half_sq = torch.from_numpy(0.5 * sq).to(self.device)
        self._emax = float(np.sqrt(sq.max()))
        self._bias_max = float(0.5 * sq.max())
        # Sort rows by norm (stable: a deterministic layout); padding rows are zero vectors with a
        # huge negative bias that map to a real row, so a padding candidate is harmless.
        order = np.argsort(sq, kind="stable")
        self._groups = -(-v // _GROUP)
        pad = self._groups * _GROUP - v
        self._order = torch.from_numpy(np.concatenate([order, np.full(pad, order[-1])])).to(self.device)
        bias = np.concatenate([-0.5 * sq[order], np.full(pad, _PAD_BIAS)])
        self._bias = torch.from_numpy(bias.astype(np.float32)).to(self.device)
        real = np.where(np.arange(bias.size) < v, bias, -np.inf).reshape(self._groups, _GROUP)
        self._group_bias = torch.from_numpy(real.max(axis=1).astype(np.float32)).to(self.device)  # real rows
        padded = np.zeros((self._groups * _GROUP, d), dtype=np.float32)
        np.take(self.table, order, axis=0, out=padded[:v])
        rows32 = torch.from_numpy(padded).to(self.device)
        # Per screen: rows, max ‖ẽ − e‖, max ‖ẽ‖. The float32 screen (also the bfloat16 screen's
        # fallback) holds the table itself, so it has no rounding of e.
        self._screens: dict[str, tuple[torch.Tensor, float, float]] = {"float32": (rows32, 0.0, self._emax)}
        if self.screen == "bfloat16":
            rows16 = rows32.bfloat16()
            err_max = tilde_max = 0.0
            for r in range(0, rows16.shape[0], _ROW_CHUNK):  # chunks stay in cache
                tilde = rows16[r:r + _ROW_CHUNK].float()
                err_max = max(err_max, float(torch.linalg.vector_norm(tilde - rows32[r:r + _ROW_CHUNK], dim=1).max()))
                tilde_max = max(tilde_max, float(torch.linalg.vector_norm(tilde, dim=1).max()))
            # e − bf16(e) is exact in float32; the float32 norms are inflated to stay upper bounds.
            self._screens[self.screen] = (rows16, err_max * (1 + 1e-4), tilde_max * (1 + 1e-4))

    @property
    def dim(self) -> int:
        """Width of the table."""
        return int(self.table.shape[1])

    def search(self, queries: np.ndarray) -> np.ndarray:
        """Row of the L2-nearest table vector per query (exact; ties go to the lowest row).

        Args:
            queries: ``(n, d)`` (or ``(d,)``) finite real array; float64 is searched as given.

        Returns:
            int64 array of shape ``(n,)``.

        Raises:
            ValueError: If ``queries`` contain NaN/inf or have the wrong shape.
        """
        return self._run(queries, 1)[0][:, 0]

    def search_topk(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest rows per query with their exact L2 distances, nearest first.

        Returns:
            ``(rows, distances)``: int64 and float32 arrays of shape ``(n, k)``, ascending by
            distance (ties by row); Euclidean distances computed in float64 from differences.
        """
        k = int(k)
        if not 1 <= k <= self.table.shape[0]:
            raise ValueError(f"k must be between 1 and the table size {self.table.shape[0]}, got {k}")
        rows, q_all = self._run(queries, k)
        dist = np.empty(rows.shape, dtype=np.float64)
        for s in range(0, rows.shape[0], self.block_size):
            diff = self.table[rows[s:s + self.block_size]].astype(np.float64) - q_all[s:s + self.block_size, None, :]
            dist[s:s + self.block_size] = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        # Rows are ranked by exact scores; differences give the most accurate distances, and the
        # running maximum only smooths float64 rounding (~1e-16) between the two forms.
        return rows, np.maximum.accumulate(dist, axis=1).astype(np.float32)

    def _queries(self, block: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
        """float32 queries on the device, plus float64 ones when the input is not float32."""
        import torch  # lazy (torch)

        # torch.tensor copies: safe with read-only inputs (torch.from_numpy would warn).
        q32 = torch.tensor(block, dtype=torch.float32, device=self.device)
        return q32, None if block.dtype == np.float32 else torch.tensor(block, dtype=torch.float64, device=self.device)

    def _padded(self, q32: torch.Tensor, q64: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """On a CPU, the block with zero queries added up to a multiple of :data:`QUERY_MULTIPLE` rows: oneDNN
        keeps a kernel for every product shape it meets (about 0.6 MB each, up to 1,024), and blocks of every
        width made a 120,000-record privatization grow by 2.5 GB. Each query is screened and certified on its
        own, so the added rows change no answer; the caller drops theirs."""
        n = q32.shape[0]
        if q32.device.type != "cpu" or n % QUERY_MULTIPLE == 0:
            return q32, q64
        import torch  # lazy (torch)

        extra = QUERY_MULTIPLE - n % QUERY_MULTIPLE
        return (torch.cat([q32, q32.new_zeros((extra, q32.shape[1]))]),
                None if q64 is None else torch.cat([q64, q64.new_zeros((extra, q64.shape[1]))]))

    def _run(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``(n, k)`` of the k nearest per query, and the validated queries.

        Tiers: the configured screen, then a float32 screen, then float64 brute force, each over
        the queries the previous one could not certify. Fallbacks are batched over the whole call:
        a float32 screen reads the whole table however few queries it serves.
        """
        q_all = as_matrix("queries", queries, self.dim)  # all rows checked before any search
        if not self._built and k == 1 and q_all.shape[0] <= self.cold_queries and not _torch_loaded():
            # Cold start: the same exact answers from numpy, so a short input never imports torch.
            self.cold_queries -= q_all.shape[0]
            self._cold = self._cold or Float64Search(self.table)
            return self._cold.nearest(q_all)[:, None], q_all
        if not self._built:
            self._build()
        import torch  # lazy (torch)

        rows = np.empty((q_all.shape[0], k), dtype=np.int64)
        pending = np.arange(q_all.shape[0])
        with torch.inference_mode():
            for tier in dict.fromkeys((self.screen, "float32", None)):
                if not pending.size:
                    break
                if tier == "float32" and self.screen != "float32":
                    self.fallbacks += int(pending.size)
                if tier is None:
                    self.brute_forced += int(pending.size)
                left = [np.empty(0, dtype=np.int64)]
                for s in range(0, pending.size, self.block_size):
                    idx = pending[s:s + self.block_size]
                    q32, q64 = self._queries(q_all[idx[0]:idx[-1] + 1] if tier == self.screen else q_all[idx])
                    if tier is None:
                        rows[idx] = self._brute_force(q64 if q64 is not None else q32.double(), k).cpu().numpy()
                        continue
                    r, ok = self._screened(*self._padded(q32, q64), k, tier)
                    rows[idx] = r[:idx.size].cpu().numpy()
                    left.append(idx[~ok[:idx.size].cpu().numpy()])
                pending = np.concatenate(left)
        return rows, q_all

    def _screened(self, q32: torch.Tensor, q64: torch.Tensor | None, k: int, screen: str
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Screen, re-rank and certify one block; returns rows ``(n, k)`` and the certified mask."""
        import torch  # lazy (torch)

        rows_s, err_max, tilde_max = self._screens[screen]
        u, in_unit = _SCREENS[screen], (_fp32_input_unit() if screen == "float32" else 0.0)
        up = u / (1.0 - u)  # x + up·|x| bounds the value that rounded to x (rounding is monotone)
        n, g, groups, dev = q32.shape[0], _GROUP, self._groups, q32.device
        q_screen = q32.to(rows_s.dtype)
        # (V_pad, n) layout: the group maximum reduces a middle axis over contiguous queries
        # (vectorised). Each product of ``step`` table rows is reduced while still in L2.
        scores = self._score_buffer(groups * g * n, rows_s.dtype).view(groups * g, n)
        maxima = torch.empty((groups, n), dtype=rows_s.dtype, device=dev)
        q_t = q_screen.T
        step = max(1, self._score_chunk // (n * g)) * g
        for r in range(0, groups * g, step):
            chunk, out = scores[r:r + step], maxima[r // g:(r + step) // g]
            torch.matmul(rows_s[r:r + step], q_t, out=chunk)
            if rows_s.dtype == torch.bfloat16:
                # bfloat16 amax is not vectorised on CPU (~8x slower than int16). As signed int16
                # the bit patterns order non-negative floats correctly; a negative int16 maximum
                # means an all-negative group, whose maximum is then bounded above by 0.
                torch.amax(chunk.view(torch.int16).view(-1, g, n), dim=1, out=out.view(torch.int16))
                out.view(torch.int16).clamp_(min=0)
            else:
                torch.amax(chunk.view(-1, g, n), dim=1, out=out)

        kc = min(max(self.candidates, k), self.table.shape[0])
        m = min(groups, -(-kc // g) + self.extra_groups)  # groups gathered
        bound = maxima.float().T  # per group, below: >= screen value + bias of any of its rows
        if rows_s.dtype == torch.bfloat16:  # clamped maxima are >= 0: rounding up is a scaling
            bound = torch.add(self._group_bias, bound, alpha=1.0 + up)
        else:
            bound = bound + bound.abs() * up + self._group_bias
        if m < groups:
            top = torch.topk(bound, m + 1, dim=1)
            picked, left_out = top.indices[:, :m], top.values[:, m]
        else:
            picked = torch.arange(groups, device=dev).expand(n, -1)
            left_out = torch.full((n,), -math.inf, device=dev)
        prow = (picked[:, :, None] * g + torch.arange(g, device=dev)).view(n, m * g)  # sorted-table rows
        by_query = scores.view(groups, g, n).permute(2, 0, 1)  # (n, groups, g) view, no copy
        est = torch.gather(by_query, 1, picked[:, :, None].expand(n, m, g)).reshape(n, m * g).float()
        est = est + est.abs() * up + self._bias[prow]
        best = torch.topk(est, kc, dim=1)
        # Gathered rows left out have est <= the kc-th value (none are left out when m·g == kc).
        threshold = torch.maximum(best.values[:, -1], left_out) if m * g > kc else left_out
        rows, kth = self._rerank(q32, q64, self._order[prow.gather(1, best.indices)], k)

        # Certificate (step 3): rows not re-ranked have s(e) <= threshold + slack; the k-th
        # re-ranked row has s >= kth. Norms in float32 are inflated to stay upper bounds.
        q_tilde = q_screen.float()
        nq_t = torch.linalg.vector_norm(q_tilde, dim=1).double() * (1 + 1e-4)
        delta = torch.linalg.vector_norm(q_tilde - q32, dim=1).double() * (1 + 1e-4) + in_unit * nq_t
        err_max += in_unit * tilde_max  # TF32/bf16 "float32" matmuls round their inputs too
        if q64 is not None:
            delta = delta + (q32.double() - q64).norm(dim=1)
        gamma = 2 * self.dim * 2.0**-24 / (1 - 2 * self.dim * 2.0**-24)  # float32 accumulation, any order
        if dev.type == "cuda" and screen != "float32" and _cuda_reduced_precision():
            gamma += 2 * u  # cuBLAS may round split-K partial sums to the screen dtype
        slack = (nq_t * err_max + delta * self._emax + gamma * nq_t * tilde_max
                 + 2.0**-20 * (nq_t * tilde_max + self._bias_max) + 1e-30)  # float32 additions
        sane = nq_t * tilde_max < _HUGE  # a screen that may have overflowed certifies nothing
        return rows, (kth > threshold.double() + slack) & sane

    def _score_buffer(self, size: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat buffer for a block's screen scores, kept for the next block (one per thread): a fresh 15 MB
        block per search left peak memory to chance in glibc's heap (reports/benchmarks.md, issue #29)."""
        buffers = self._scratch.__dict__
        if dtype not in buffers or buffers[dtype].numel() < size:
            import torch  # lazy (torch)

            buffers[dtype] = torch.empty(size, dtype=dtype, device=self.device)
        return buffers[dtype][:size]

    def _rerank(self, q32: torch.Tensor, q64: torch.Tensor | None, cand: torch.Tensor, k: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The k best candidates exactly (ties to the lowest row), and a lower bound on the k-th score.

        Scores ``q·e − ‖e‖²/2`` come from a float32 batched product with error at most ``err``
        (γ·‖q‖·‖e‖ accumulation, plus the float32 rounding of float64 q). When every gap among the first
        k+1 exceeds 2·err the order is certain; otherwise (close calls, duplicate rows) the query
        is re-ranked in float64.
        """
        import torch  # lazy (torch)

        n, kc = cand.shape
        gathered = self._table.index_select(0, cand.reshape(-1)).view(n, kc, -1)
        score = torch.bmm(gathered, q32[:, :, None])[:, :, 0].double() - self._half_sq[cand]
        gamma = self.dim * 2.0**-24 / (1 - self.dim * 2.0**-24) + 2 * _fp32_input_unit() + 1e-12
        nq = torch.linalg.vector_norm(q32, dim=1).double() * (1 + 1e-4)
        err = gamma * nq * self._emax + 1e-12 * self._bias_max
        if q64 is not None:
            err = err + (q32.double() - q64).norm(dim=1) * self._emax
        vals, pos = torch.topk(score, min(k + 1, kc), dim=1)
        unsure = ((vals[:, :-1] - vals[:, 1:]) <= 2.0 * err[:, None]).any(dim=1)
        rows, kth = cand.gather(1, pos[:, :k]), vals[:, k - 1] - err
        if bool(unsure.any()):
            idx = torch.nonzero(unsure).flatten()
            rows[idx], kth[idx] = self._exact_rerank((q64 if q64 is not None else q32.double())[idx], cand[idx], k)
        return rows, kth

    def _exact_rerank(self, q64: torch.Tensor, cand: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k best candidates by float64 scores (lexicographic on score, then lowest row).

        Returns:
            Rows ``(n, k)`` and a lower bound on the k-th true score (float64 rounding allowed for).

        Scores ``q·e − ‖e‖²/2`` (not differences ``q − e``) are what :func:`~rapt_audit.mechanisms.nn_exact.exact_nearest` ranks by;
        they also stay accurate for queries far larger than the table, where ``q − e`` rounds to q.
        """
        import torch  # lazy (torch)

        score = torch.einsum("nkd,nd->nk", self._table[cand].double(), q64) - self._half_sq[cand]
        by_row = torch.sort(cand, dim=1).indices
        by_score = torch.sort(score.gather(1, by_row), dim=1, descending=True, stable=True).indices
        order = by_row.gather(1, by_score)[:, :k]
        slack = 1e-12 * (q64.norm(dim=1) * self._emax + self._bias_max)
        return cand.gather(1, order), score.gather(1, order[:, -1:])[:, 0] - slack

    def _brute_force(self, q64: torch.Tensor, k: int) -> torch.Tensor:
        """Float64 exact search (the last resort), chunked over the table."""
        import torch  # lazy (torch)

        parts = []
        for s in range(0, self.table.shape[0], 4096):
            parts.append(q64 @ self._table[s:s + 4096].double().T - self._half_sq[s:s + 4096])
        score = torch.cat(parts, dim=1)
        # Spare candidates (stable sort: lowest row first on ties), then the fast path's final ranking.
        cand = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :min(k + 8, score.shape[1])]
        return self._exact_rerank(q64, cand, k)[0]


def _torch_loaded() -> bool:
    """Whether this process has imported torch already (then the cold start saves nothing)."""
    return "torch" in sys.modules


def _fp32_input_unit() -> float:
    """Rounding of the *inputs* of float32 matmuls: 0, or 2⁻⁸ if the user allowed TF32/bf16 ones."""
    import torch  # lazy (torch)

    return 0.0 if torch.get_float32_matmul_precision() == "highest" else 2.0**-8


def _cuda_reduced_precision() -> bool:
    """Whether cuBLAS may reduce bf16 GEMMs in reduced precision (read, never set; torch's default: yes)."""
    import torch  # lazy (torch)

    return bool(getattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", True))

