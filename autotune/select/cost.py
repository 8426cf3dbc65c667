"""A cost model for shapes never tuned: predicts each candidate config's time on a new shape from the
stored trials of one GPU, op, dtype and layout, so that the selector can pick the fastest prediction.

    predicted time = roofline(shape, config) x correction(config, shape)

- The roofline is what the stored best trials say the GPU reaches: a fixed latency plus the bytes the
  shape must move at the best bandwidth any tuned shape reached (and, for a compute-bound op, its
  flops at the best rate reached, whichever takes longer), stretched by how much of the GPU the
  config's grid fills (a grid of 3 blocks on 132 SMs cannot use the whole memory system).
- The correction is learned per config: log(time / roofline) at every tuned shape, averaged with
  weights that fall off with the distance between shapes in log space (a Gaussian of width SIGMA
  octaves). A tuned shape that holds the config among its stored trials says how it did there; one
  that does not says it was slower than that shape's slowest stored trial (the records keep each
  shape's few fastest), which is what keeps a config that won far away from beating the local
  leaders. Except where the config cannot run on a shape that allows fewer load widths (`vec`) than
  the new one: an odd N's leaders beat only other scalar loads, so 16-byte loads are not taken to be
  slower there. Counted so, float16 4096x11008 went to a scalar-load config of the odd 4097x8191 and
  ran at 31.7 us on the H200, where the vec=8 leaders of 4096x8192 are picked now. And the other way
  round where a tuned shape of the new one's own alignment is near (ALIKE_OCTAVES): an odd N's scalar
  loads are not taken to run as fast as the 16-byte leaders of the even shapes around it.

Where a config's grid takes more waves of blocks on the new shape than on the nearest tuned shape that
holds it, and each thread's path (its share of the bytes times the waves) grows faster than the bytes,
its time there scaled by that path is a floor (CostModel._more_waves_floor): a split-K config tuned at
twice the K spills into a second wave where K halves and N grows. Only for families that estimate
their registers (Op.registers), since the blocks an SM holds, so the waves, follow from them.

A library's own pick (cuBLASLt's: predict_config_free) has no config to compare across shapes; its time
is predicted from its times on the tuned shapes whose rows allow the same load widths as the new one's,
where any do: on odd N its kernels, too, lose their 16-byte loads. From every shape, the held-out float16
3x131071x1024 (K x N) was predicted at 67.9 us and ran 130.1 on the H200; leave one shape out over the
shipped records, the median error of these predictions fell from 0.039 to 0.034 (|log|, 719 shapes).

A stored trial is evidence for the config it timed only: a neighbour's leader that Space.fit must
change to run on the new shape (vec=8 to vec=1 on an odd N) is a candidate, but its time with 16-byte
loads says nothing of its time with scalar ones. On issue 30's held-out shapes, counting it did: the
float32 12x4099x1021 N x K GEMM was predicted at 12 us from vec=4 leaders and ran at 40.

Only times a kernel call can take (autotune/core/timing_bounds.py) are evidence: the store refuses others,
but a database written by hand or by an older autotune may hold one, and a time of 1e-200 us squared
is 0 in the least-squares fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune import ops
from autotune.core.limits import MAX_SM_COUNT
from autotune.core.problem import Problem
from autotune.core.space import Config, Space, config_key
from autotune.core.timing_bounds import is_plausible_time_us
from autotune.ops.base import Op
from autotune.select import grid

# Width of the distance weighting in octaves (shape_distance): a tuned shape one octave further away
# than the nearest weighs exp(-2), about a seventh, of it. Chosen by leave-one-shape-out on the
# shipped records (scripts/eval_cost_model.py): 0.35 did as well, 0.7 and 1 worse.
SIGMA = 0.5
# A config a tuned shape does not hold among its stored trials counts as this much slower there than
# its slowest stored trial (log ratio): it was slower, by an unknown amount, or never ran there.
ABSENT_MARGIN = 0.02
# A grid of blocks on at least this share of the SMs counts as filling the GPU: the stored skinny
# GEMM leaders stream 14336^2 at the best rate stored with 112 blocks on 132 SMs (more warps per
# block make up for the idle SMs); smaller grids are taken to reach their share of it.
FULL_GRID = 0.5
# Where a tuned shape that allows the same load widths as a new one lies within this many octaves of
# it, tuned shapes that allow wider loads say nothing of a config they do not hold
# (CostModel._says_nothing_of): transposed float32 4099x12289 has 4097x8191 0.6 octaves out.
ALIKE_OCTAVES = 1.0
# How many of the nearest tuned shapes give their stored configs as candidates.
NEIGHBOURS = 4
# The most of the fastest tuned call that the fixed latency may take (fit_roofline).
LATENCY_SHARE = 0.9
# How much faster than the bytes a thread's critical path must grow for the waves rule to speak
# (CostModel._more_waves_floor): 5%, so that rounding in the grid does not trigger it.
PATH_MARGIN = 1.05
# A config that ran this many times slower than the roofline where it was timed was bound by its
# threads' steps there, not by the memory (CostModel.threads_bound_floor): 6x32769's leader ran 5.3x.
THREADS_BOUND = 3.0
# A config whose blocks add their sums keeps its time on a larger tuned shape, less the smaller work,
# where the work at the best rates took under this share of that time: fixed costs (the launch, the
# blocks' sum) held it there (CostModel._fixed_sum_floor).
FIXED_SHARE = 0.5


class Timed(Protocol):
    """A stored OK trial as the model reads it (autotune.store's TrialRow and BestRow have these)."""

    @property
    def config(self) -> Mapping[str, int]: ...
    @property
    def time_us(self) -> float | None: ...


def shape_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """Distance in log space: 1024 is as far from 2048 as 4096 from 8192."""
    return math.hypot(*(math.log2(x / y) for x, y in zip(a, b, strict=True)))


@dataclass(frozen=True)
class Roofline:
    """latency + work / fill: work at the best rates stored (scaled), fill the share of SMs a grid covers."""

    bytes_per_us: float
    flops_per_us: float | None  # None for a memory-bound op: its flops rate is no ceiling
    latency_us: float
    scale: float  # how far above the ceilings the best trials typically run
    sm_count: int | None

    def work_us(self, problem: Problem, config: Mapping[str, int] | None = None) -> float:
        """The work at the ceilings; with a `config`, the bytes it streams (Op.bytes_streamed: an
        operand read once per tile counts as often)."""
        op = ops.for_problem(problem)
        moved = op.bytes_moved(problem) if config is None else _streamed(op, problem, config)
        work = moved / self.bytes_per_us
        if self.flops_per_us:
            work = max(work, op.flops(problem) / self.flops_per_us)
        return self.scale * work

    def fill(self, problem: Problem, config: Mapping[str, int]) -> float:
        """The share of the SMs the config's grid occupies at once (1 where the SM count is unknown, or
        is none a GPU has: a GPU row written straight into the database)."""
        if self.sm_count is None or not 1 <= self.sm_count <= MAX_SM_COUNT:
            return 1.0
        try:
            grid = ops.for_problem(problem).launch(problem, config, self.sm_count).grid
        except (KeyError, ValueError, ZeroDivisionError):
            return 1.0  # a config of another space: no say
        return min(1.0, grid[0] * grid[1] * grid[2] / (self.sm_count * FULL_GRID))

    def time_us(self, problem: Problem, fill: float = 1.0, config: Mapping[str, int] | None = None) -> float:
        return self.latency_us + self.work_us(problem, config) / fill

    def waves(self, problem: Problem, config: Mapping[str, int]) -> int | None:
        return None if self.sm_count is None else grid.waves(problem, config, self.sm_count)

    def critical_path(self, problem: Problem, config: Mapping[str, int]) -> float | None:
        return None if self.sm_count is None else grid.critical_path(problem, config, self.sm_count)

    def text(self) -> str:
        rate = f"{self.bytes_per_us / self.scale / 1e6:.2f} TB/s"
        if self.flops_per_us:
            rate += f" or {self.flops_per_us / self.scale / 1e6:.0f} TFLOP/s"
        return f"{self.latency_us:.2f} us + bytes at {rate}"


def fit_roofline(best: Sequence[tuple[Problem, float]], sm_count: int | None) -> Roofline | None:
    """The ceilings are the best rates any tuned shape reached; latency and scale are fitted by least
    squares in relative error over the tuned shapes' best times (latency >= 0). None without data."""
    best = [(problem, time) for problem, time in best if is_plausible_time_us(time)]
    if not best:
        return None
    op = ops.for_problem(best[0][0])
    bandwidth = max(op.bytes_moved(p) / t for p, t in best)
    peak = max(op.flops(p) / t for p, t in best) if op.compute_bound else None
    plain = Roofline(bandwidth, peak, 0.0, 1.0, sm_count)
    work = [(plain.work_us(p), t) for p, t in best]
    latency, scale = _relative_least_squares(work)
    # Two shapes fit any latency (the two float32 GEMMs stored give 900 us).
    if len(best) < 3:
        latency, scale = _relative_least_squares(work, latency=False)
    # A call's fixed cost is less than the fastest call: where the fit says more (the GEMVs' tuned
    # shapes of a few kilobytes run at 1.2-1.3 us, all launch), it is held at LATENCY_SHARE of that,
    # not dropped: without it a shape of a few kilobytes was predicted at a fifth of its time.
    ceiling = LATENCY_SHARE * min(t for _, t in best)
    if latency > ceiling:
        latency, scale = ceiling, _scale_given_latency(work, ceiling)
    return Roofline(bandwidth, peak, latency, scale, sm_count)


def _scale_given_latency(points: Sequence[tuple[float, float]], latency: float) -> float:
    """b minimising the sum of ((t - latency - b w) / t)^2 over (w, t)."""
    return sum(w / t * (1 - latency / t) for w, t in points) / sum((w / t) ** 2 for w, t in points)


def _relative_least_squares(points: Sequence[tuple[float, float]], latency: bool = True) -> tuple[float, float]:
    """(a, b) >= 0 minimising the sum of ((t - a - b w) / t)^2 over (w, t); a = 0 without `latency`."""
    # Normal equations of rows (1/t, w/t) against 1.
    s11 = sum(1 / t**2 for _, t in points)
    s12 = sum(w / t**2 for w, t in points)
    s22 = sum(w**2 / t**2 for w, t in points)
    r1 = sum(1 / t for _, t in points)
    r2 = sum(w / t for w, t in points)
    det = s11 * s22 - s12**2
    if latency and det > 0:
        a, b = (r1 * s22 - r2 * s12) / det, (r2 * s11 - r1 * s12) / det
        if a >= 0 and b > 0:
            return a, b
    return 0.0, r2 / s22  # no latency term


@dataclass(frozen=True)
class Candidate:
    config: Config
    origin: str  # where it came from: "#1 of 4096x4096" (a tuned shape's stored config), "seed", "default"
    from_shape: tuple[int, ...] | None = None  # the tuned shape whose stored config it is


@dataclass(frozen=True)
class Prediction:
    config: Config
    time_us: float
    candidate: Candidate
    roofline_us: float
    correction: float  # predicted time / roofline
    timed_on: tuple[tuple[int, ...], ...]  # nearby tuned shapes that hold this config, nearest first
    basis: str  # one line: what the prediction is made of
    # False where no shape of this kernel family is tuned: the roofline then comes from other
    # families' shapes (a GEMM of 4096^3 says little of one of 8x4096^2), good for ranking the
    # candidates by their grids, not for a time to show.
    rated: bool = True


@dataclass(frozen=True)
class _Shape:
    problem: Problem
    trials: tuple[tuple[Config, float], ...]  # stored OK trials, fastest first

    @property
    def slowest_us(self) -> float:
        return self.trials[-1][1]


class CostModel:
    """Fitted to the stored trials of the tuned shapes of one GPU, op, dtype and layout."""

    def __init__(
        self,
        stored: Mapping[Problem, Sequence[Timed]],
        sm_count: int | None = None,
        *,
        roofline_from: Sequence[tuple[Problem, float]] = (),
        sigma: float = SIGMA,
        absent_margin: float = ABSENT_MARGIN,
        neighbours: int = NEIGHBOURS,
    ) -> None:
        """`stored`: the stored OK trials of each tuned shape whose configs are of this problem's space
        (the selector's pool); `roofline_from`: (problem, best time) of tuned shapes of the same op, dtype
        and layout served by other kernel families, which only help fit the roofline."""
        shapes = []
        for problem, rows in stored.items():
            timed = [(dict(r.config), float(r.time_us)) for r in rows if r.time_us and is_plausible_time_us(r.time_us)]
            trials = sorted(timed, key=lambda x: x[1])
            if trials:
                shapes.append(_Shape(problem, tuple(trials)))
        self.shapes = tuple(sorted(shapes, key=lambda s: s.problem.shape))
        best = [(s.problem, s.trials[0][1]) for s in self.shapes]
        self.roofline = fit_roofline([*best, *roofline_from], sm_count)
        self.sigma, self.absent_margin, self.neighbours = sigma, absent_margin, neighbours
        self._runs_here: dict[Problem, dict[str, dict[Problem, float]]] = {}
        self._candidates: dict[Problem, list[Candidate]] = {}
        self._spaces: dict[Problem, Space] = {}
        self._runs_on: dict[Problem, dict[str, bool]] = {}
        self._widths: dict[Problem, frozenset[int]] = {}
        self._alike: dict[Problem, bool] = {}

    def nearest(self, problem: Problem) -> list[_Shape]:
        """Tuned shapes from the nearest outwards, the problem's own shape left out."""
        others = [s for s in self.shapes if s.problem.shape != problem.shape]
        return sorted(others, key=lambda s: (shape_distance(s.problem.shape, problem.shape), s.problem.shape))

    def candidates(self, problem: Problem) -> list[Candidate]:
        """The stored configs of the nearest tuned shapes (fitted onto this one), the op's seeds and its
        default, each once, with where it came from (listed once per problem: rank() and the
        selector's note on cuBLASLt both count them)."""
        if problem not in self._candidates:
            self._candidates[problem] = self._list_candidates(problem)
        return list(self._candidates[problem])

    def _list_candidates(self, problem: Problem) -> list[Candidate]:
        op = ops.for_problem(problem)
        space = op.space(problem)
        found: dict[str, Candidate] = {}
        for shape in self.nearest(problem)[: self.neighbours]:
            for rank, (config, _) in enumerate(shape.trials, 1):
                # As it is where it runs here, and tiling this shape as it tiled that one.
                for carried in (config, op.tiling_for(shape.problem, problem, config)):
                    fitted = space.fit(carried)
                    if fitted is not None:
                        origin = f"#{rank} of {_text(shape.problem.shape)}" + _fitted(config, fitted)
                        found.setdefault(config_key(fitted), Candidate(fitted, origin, shape.problem.shape))
        for config in op.seed_configs(problem):
            found.setdefault(config_key(config), Candidate(config, "seed"))
        default = op.default_config(problem)
        found.setdefault(config_key(default), Candidate(default, "default"))
        # Whatever an op's seeds or fitting hand back, only a config this shape runs is a candidate.
        return [c for c in found.values() if space.check(c.config) is None]

    def predict(self, problem: Problem, candidate: Candidate | Config) -> Prediction | None:
        """The predicted time of a candidate (or of a plain config) on `problem`; None where nothing
        of the op, dtype and layout is tuned."""
        if self.roofline is None:
            return None
        if not isinstance(candidate, Candidate):
            candidate = Candidate(dict(candidate), "")
        config = candidate.config
        key = config_key(config)
        stored = self._stored_as(problem).get(key, {})
        times, timed_on, mute = [], [], []
        shapes = self.nearest(problem)
        for shape in shapes:
            there = stored.get(shape.problem)
            if there is not None:
                timed_on.append(shape.problem.shape)
            else:
                there = shape.slowest_us * math.exp(self.absent_margin)
                if self._says_nothing_of(shape.problem, problem, key, config):
                    mute.append((shape.problem, there))
                    continue
            times.append((shape.problem, there))
        times = times or mute  # nothing else to go by: slower than each one's slowest, as any absence
        # The stored configs fill the GPU where they were timed (a tuned leader does); where this one
        # would not fill it on this shape, it can use only its share of the SMs.
        roof = self.roofline.time_us(problem, self.roofline.fill(problem, config), config)
        correction = self._correction(self.roofline, problem, times, config) if times else 1.0
        if not shapes:
            basis = "nothing of this kernel family tuned: ranked by how much of the GPU its grid fills"
            return Prediction(config, roof, candidate, roof, 1.0, (), basis, rated=False)
        basis = f"roofline {roof:.2f} us ({self.roofline.text()}) x {correction:.2f} " + _evidence(
            timed_on, len(shapes)
        )
        time_us = roof * correction
        floors = (
            self._more_waves_floor(problem, config, stored),
            self._more_steps_floor(problem, config, stored),
            self._fixed_sum_floor(problem, config, stored),
        )
        for floor in floors:
            if floor is not None and floor[0] > time_us:
                time_us, basis = floor[0], floor[1] + "; else " + basis
        return Prediction(config, time_us, candidate, roof, correction, tuple(timed_on), basis)

    def _more_waves_floor(
        self, problem: Problem, config: Mapping[str, int], stored: Mapping[Problem, float]
    ) -> tuple[float, str] | None:
        """Where the config's grid takes more waves here than on the nearest tuned shape that holds it,
        and each thread's critical path (Roofline.critical_path) grows faster than the bytes: its time
        there, the part above the latency scaled by the path's growth. The roofline scales by bytes,
        which shrink where K halves; a split config's blocks then halve their work but spill into a
        second wave (float16 8x11008x4096 K x N on the H200: 8x8192x8192's leader, split 2, at 34.1 us
        where the bytes said 26.9). None where the rule does not speak."""
        assert self.roofline is not None
        there = _nearest(stored, problem)
        if there is None:
            return None
        waves_here, waves_there = self.roofline.waves(problem, config), self.roofline.waves(there, config)
        if waves_here is None or waves_there is None or waves_here <= waves_there:
            return None
        scaled = self._scaled_by_path(problem, config, there, stored[there])
        if scaled is None:
            return None
        time_us, scaled_by = scaled
        where = f"{stored[there]:.2f} us on {_text(there.shape)} in {waves_there} wave(s), {waves_here} here"
        return time_us, where + scaled_by

    def _more_steps_floor(
        self, problem: Problem, config: Mapping[str, int], stored: Mapping[Problem, float]
    ) -> tuple[float, str] | None:
        """Where the op counts each thread's steps (Op.thread_steps) and they grow, faster than the bytes,
        from the nearest tuned shape that holds the config: its time there, the part above the latency
        scaled by that growth. A persistent grid that took its rows in one pass there may take two here
        for half again the bytes. None where the rule does not speak."""
        assert self.roofline is not None
        there, sm_count = _nearest(stored, problem), self.roofline.sm_count
        if there is None or sm_count is None or not 1 <= sm_count <= MAX_SM_COUNT:
            return None
        op = ops.for_problem(problem)
        steps_here, steps_there = op.thread_steps(problem, config, sm_count), op.thread_steps(there, config, sm_count)
        if not steps_here or not steps_there:
            return None
        growth = steps_here / steps_there
        # Only more steps: where they stay and the bytes shrink, the roofline already speaks (a floor
        # at the time there would rank the config below candidates never timed).
        if steps_here <= steps_there or growth <= op.bytes_moved(problem) / op.bytes_moved(there) * PATH_MARGIN:
            return None
        latency = self.roofline.latency_us
        where = f"{stored[there]:.2f} us on {_text(there.shape)} in {steps_there} steps a thread, {steps_here} here"
        return latency + (stored[there] - latency) * growth, where

    def _fixed_sum_floor(
        self, problem: Problem, config: Mapping[str, int], stored: Mapping[Problem, float]
    ) -> tuple[float, str] | None:
        """Where the config adds its blocks' sums here (through the workspace, a second pass of the last
        block to arrive, or in a cluster's shared memory): its time on the nearest tuned shape that
        holds it and sums its blocks there too (else the fastest config that summed its blocks on the
        nearest tuned shape where any did), less the time its greater work takes at the best rates
        stored (bytes, and flops where they bound the op), where this problem is less work than that
        shape and there the work at those rates took under FIXED_SHARE of the time. The launch and the
        blocks' sum are fixed costs the work does not scale; the roofline scaled them away: float16
        4096x1 transposed took 16384x7's leader of 32 blocks predicted at 1.25 us and ran 2.92, where
        one block ran 1.18; a cluster of 8 blocks, 65536x1's leader at 2.60 us, was predicted at 1.29
        and ran 2.15. None where the rule does not speak."""
        assert self.roofline is not None
        sm_count = self.roofline.sm_count
        if sm_count is None or not 1 <= sm_count <= MAX_SM_COUNT:
            return None
        op = ops.for_problem(problem)
        if not _sums_blocks(op, problem, config, sm_count):
            return None
        there = _nearest(stored, problem)
        if there is not None and _sums_blocks(op, there, config, sm_count):
            time_there, what = stored[there], "it"
        else:
            found = self._fastest_summing(problem, op, sm_count)
            if found is None:
                return None
            (there, time_there), what = found, "a config summing its blocks"
        # The work at the best rates stored (bytes, and flops where they bound the op), unscaled.
        work_there, work_here = (self.roofline.work_us(p) / self.roofline.scale for p in (there, problem))
        if work_here >= work_there or work_there > FIXED_SHARE * time_there:
            return None  # more work here, or the work took most of the time there: the roofline speaks
        where = f"{what} {time_there:.2f} us on {_text(there.shape)}, less {work_there - work_here:.2f} us of work"
        return time_there - (work_there - work_here), where

    def _fastest_summing(self, problem: Problem, op: Op, sm_count: int) -> tuple[Problem, float] | None:
        """The nearest tuned shape with a stored trial whose blocks add their sums there, and the fastest
        such trial's time."""
        for shape in self.nearest(problem):
            times = [t for c, t in shape.trials if _sums_blocks(op, shape.problem, c, sm_count)]
            if times:
                return shape.problem, min(times)
        return None

    def threads_bound_floor(self, problem: Problem, config: Mapping[str, int]) -> float | None:
        """Where the config ran at under 1/THREADS_BOUND of the roofline's speed on the nearest tuned
        shape that holds it (its threads' steps, not the memory, set its time there) and each thread's
        path grows faster than the bytes here: its time there scaled by that path. bfloat16 5x65537 on
        the H200: 6x32769's leader (64-thread blocks, 16-way split) walks twice the row per thread
        there, ran 10.66 us where the bytes said 5.23. The selector weighs it against cuBLASLt's
        prediction (choose.py); it does not rank our candidates, where it was measured to cost more
        than it gained (docs/findings.md). None where the rule does not speak."""
        if self.roofline is None:
            return None
        stored = self._stored_as(problem).get(config_key(config), {})
        there = _nearest(stored, problem)
        if there is None or stored[there] < THREADS_BOUND * self.roofline.time_us(there):
            return None
        scaled = self._scaled_by_path(problem, config, there, stored[there])
        return None if scaled is None else scaled[0]

    def _scaled_by_path(
        self, problem: Problem, config: Mapping[str, int], there: Problem, time_there: float
    ) -> tuple[float, str] | None:
        """`time_there`, the config's time on `there`, its part above the latency scaled by how much
        longer each thread's path is here, with what it was scaled by; None where the path is unknown
        or grows no faster than the bytes (the roofline already scales by those)."""
        assert self.roofline is not None
        path_here = self.roofline.critical_path(problem, config)
        path_there = self.roofline.critical_path(there, config)
        if path_here is None or not path_there:
            return None
        op = ops.for_problem(problem)
        growth = path_here / path_there
        if growth <= op.bytes_moved(problem) / op.bytes_moved(there) * PATH_MARGIN:
            return None
        latency = self.roofline.latency_us
        return latency + (time_there - latency) * growth, f": x {growth:.2f} its threads' path"

    def predict_config_free(
        self, problem: Problem, timed: Mapping[Problem, float], config: Config, what: str, who: str
    ) -> Prediction | None:
        """The predicted time on `problem` of a candidate whose config means nothing across shapes (a
        library's own pick, `config`, `what` it is, `who` makes it), from its best times on tuned shapes
        (`timed`): the roofline times the distance-weighted correction those shapes show, as for our
        configs (a library fills the GPU as it sees fit, so no grid share). None where nothing says."""
        shapes = sorted(
            (p for p, time in timed.items() if p.shape != problem.shape and is_plausible_time_us(time)),
            key=lambda p: shape_distance(p.shape, problem.shape),
        )
        if self.roofline is None or not shapes:
            return None
        # The library's kernels, too, load as wide as the rows' alignment allows: where some tuned shapes
        # allow the same load widths as this one, only they speak for it.
        alike = [shape for shape in shapes if self._load_widths(shape) == self._load_widths(problem)]
        shapes = alike or shapes
        roof = self.roofline.time_us(problem)
        correction = self._correction(self.roofline, problem, [(shape, timed[shape]) for shape in shapes])
        candidate = Candidate(dict(config), what, shapes[0].shape)
        evidence = _evidence([s.shape for s in shapes], len(shapes))
        basis = f"{who}: roofline {roof:.2f} us ({self.roofline.text()}) x {correction:.2f} {evidence}"
        return Prediction(dict(config), roof * correction, candidate, roof, correction, (), basis)

    def _correction(
        self,
        roofline: Roofline,
        problem: Problem,
        times: Sequence[tuple[Problem, float]],
        config: Mapping[str, int] | None = None,
    ) -> float:
        """How far above the roofline `problem` should run: the geometric mean of time / roofline over
        tuned shapes' times, weighted by a Gaussian of their distance (SIGMA) relative to the nearest,
        so that far shapes do not all underflow to zero. Our configs' (each shape's roofline counting
        the bytes `config` streams there) and cuBLASLt's alike."""
        closest = min(shape_distance(shape.shape, problem.shape) for shape, _ in times)
        weighted, total = 0.0, 0.0
        for shape, time_us in times:
            weight = math.exp(-(shape_distance(shape.shape, problem.shape) ** 2 - closest**2) / (2 * self.sigma**2))
            weighted += weight * math.log(time_us / roofline.time_us(shape, config=config))
            total += weight
        return math.exp(weighted / total)

    def _says_nothing_of(self, tuned: Problem, problem: Problem, key: str, config: Mapping[str, int]) -> bool:
        """Whether a tuned shape that does not hold `config` (its key `key`) is no evidence against it:
        - the shape allows fewer load widths than `problem` (an odd N against an even one) and the config
          cannot run there: its leaders were held to narrower loads, so they beat only what was allowed;
        - or it allows more than `problem`, and a shape that allows the same lies within ALIKE_OCTAVES:
          "slower than leaders with 16-byte loads" bounds a scalar-load config at about the roofline,
          where the shapes of its own alignment say how scalar loads run. Transposed float32 4099x12289
          took a scalar-load config predicted at 1.04x its roofline from the aligned shapes next to it
          and ran 1.37x (0.79x cuBLAS); 4097x8191, 0.6 octaves out, has its scalar leaders at 1.09x and
          puts that config at 1.29x. Further out (6x32769 from 2x131071, 2.6 octaves), a shape of the
          same alignment says less than the aligned neighbours: leaving one shape out, muting them
          without that condition sent the transposed 6x32769 GEMVs to cuBLASLt at 1.6-1.7x our time."""
        if self._load_widths(problem) < self._load_widths(tuned) and self._alike_nearby(problem):
            return True
        runs = self._runs_on.setdefault(tuned, {})
        if key not in runs:
            runs[key] = self._space(tuned).check(config) is None
        return not runs[key] and self._load_widths(tuned) < self._load_widths(problem)

    def _alike_nearby(self, problem: Problem) -> bool:
        """Whether a tuned shape that allows the same load widths as `problem` lies within ALIKE_OCTAVES."""
        if problem not in self._alike:
            widths = self._load_widths(problem)
            self._alike[problem] = any(
                shape_distance(s.problem.shape, problem.shape) <= ALIKE_OCTAVES
                for s in self.shapes
                if s.problem.shape != problem.shape and self._load_widths(s.problem) == widths
            )
        return self._alike[problem]

    def _space(self, problem: Problem) -> Space:
        if problem not in self._spaces:
            self._spaces[problem] = ops.for_problem(problem).space(problem)
        return self._spaces[problem]

    def _load_widths(self, problem: Problem) -> frozenset[int]:
        """The vector widths (`vec`) the problem's space offers: its alignment, as the kernels see it
        (once per problem: ranking asks it for every candidate at every tuned shape)."""
        if problem not in self._widths:
            self._widths[problem] = frozenset(self._space(problem).choices().get("vec", ()))
        return self._widths[problem]

    def rank(self, problem: Problem) -> list[Prediction]:
        """Every candidate with its prediction, fastest first (the candidates' order breaks ties)."""
        predictions = [self.predict(problem, candidate) for candidate in self.candidates(problem)]
        found = [p for p in predictions if p is not None]
        order = {id(p): i for i, p in enumerate(found)}
        return sorted(found, key=lambda p: (p.time_us, order[id(p)]))

    def _stored_as(self, problem: Problem) -> dict[str, dict[Problem, float]]:
        """The stored trials whose config runs on this problem as it is, or tiled as it tiled its shape
        (Op.tiling_for): config key -> tuned shape -> its stored time there. A config stored as it is
        keeps its own time."""
        if problem not in self._runs_here:
            space = self._space(problem)
            op = ops.for_problem(problem)
            found: dict[str, dict[Problem, float]] = {}
            for carry in (True, False):  # the configs as they are last, so that their own times stay
                for shape in self.shapes:
                    for config, time_us in reversed(shape.trials):  # fastest last, so it stays
                        here = op.tiling_for(shape.problem, problem, config) if carry else config
                        if (not carry or here != config) and space.check(here) is None:
                            found.setdefault(config_key(here), {})[shape.problem] = time_us
            self._runs_here[problem] = found
        return self._runs_here[problem]


def _streamed(op: Op, problem: Problem, config: Mapping[str, int]) -> int:
    """The bytes `config` streams on `problem`; the fewest bytes where it is not of the problem's space."""
    try:
        return op.bytes_streamed(problem, config)
    except (KeyError, ValueError, ZeroDivisionError):
        return op.bytes_moved(problem)


def _sums_blocks(op: Op, problem: Problem, config: Mapping[str, int], sm_count: int) -> bool:
    """Whether the config's blocks add their partial sums on `problem` in a pass of their own: through
    the workspace, or in the shared memory of a thread-block cluster that is the whole grid (`cluster`
    > 1, the families' name for it; where a grid holds many clusters, their sums overlap each other's
    reads, and counting them as fixed cost moved the skinny tensor-core GEMMs' picks the wrong way)."""
    try:
        launch = op.launch(problem, config, sm_count)
    except (KeyError, ValueError, ZeroDivisionError):
        return False
    cluster = config.get("cluster", 1)
    return launch.workspace_floats > 0 or 1 < cluster == math.prod(launch.grid)


def _nearest(stored: Mapping[Problem, float], problem: Problem) -> Problem | None:
    """The tuned shape nearest to `problem` among those `stored` holds times of."""
    return min(stored, key=lambda p: (shape_distance(p.shape, problem.shape), p.shape), default=None)


def _fitted(config: Mapping[str, int], fitted: Mapping[str, int]) -> str:
    changed = [name for name in fitted if config.get(name) != fitted[name]]
    return " with " + " ".join(f"{n}={fitted[n]}" for n in changed) if changed else ""


def _evidence(timed_on: Sequence[tuple[int, ...]], count: int) -> str:
    if not timed_on:
        return f"(not among the stored trials of any of the {count} tuned shapes)"
    listed = ", ".join(_text(s) for s in timed_on[:3]) + (f" and {len(timed_on) - 3} more" if len(timed_on) > 3 else "")
    others = count - len(timed_on)
    return f"(timed on {listed}" + (f"; not among the stored trials of {others} other tuned shapes)" if others else ")")


def _text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))
