"""Online recalibration: per (degree, algo) correction factors learned from measured group times.

A profile table is taken once; the machine then drifts (other jobs, clocks, a different data mix)
and some terms of the time model are simply off. The executor feeds back what each group (or
round) really took; `OnlineCalibrator` keeps, per (degree, algo), an exponentially smoothed
measured / predicted ratio (smoothed in log space, so a 2x and a 0.5x surprise weigh alike) and
one pooled over all keys, which serves keys not seen yet. `snapshot()` freezes the factors into a
`CorrectionTable`; `CalibratedCostModel.calibrated(base, table)` is a cost model with the same
contract as `CostModel` whose group times are the base times times the factors, so later plans use
corrected predictions. Nothing here needs torch; everything serialises to JSON.

Determinism: every rank must plan with the same factors, so feed every rank the same observations
(e.g. times all-reduced over the ranks) and take snapshots at the same step on every rank.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mindspeed_mm.core.fcp.cost.model import ALGOS, CostModel
from mindspeed_mm.core.fcp.cost.table import ProfileTable
from mindspeed_mm.core.fcp.cost.workload import GroupWorkload, WorkloadColumns

CALIBRATION_VERSION = 1
Key = tuple[int, str]


@dataclass(frozen=True)
class CalibrationSettings:
    """How fast and how far the factors may move."""

    smoothing: float = 0.3
    """Weight of a new observation in the smoothed log ratio, in (0, 1] (1: keep only the latest)."""
    min_factor: float = 0.2
    """Smallest factor (a ratio below is clipped: one wild measurement cannot wreck the plans)."""
    max_factor: float = 5.0
    """Largest factor."""
    min_observations: int = 1
    """Observations a key needs before its own factor replaces the pooled one."""

    def __post_init__(self) -> None:
        if isinstance(self.smoothing, bool) or not isinstance(self.smoothing, (int, float)) \
                or not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing!r}")
        if not (isinstance(self.min_factor, (int, float)) and isinstance(self.max_factor, (int, float))
                and 0 < self.min_factor <= 1 <= self.max_factor and math.isfinite(self.max_factor)):
            raise ValueError(f"need 0 < min_factor <= 1 <= max_factor < inf, got {self.min_factor!r} and "
                             f"{self.max_factor!r}")
        if isinstance(self.min_observations, bool) or not isinstance(self.min_observations, int) \
                or self.min_observations < 1:
            raise ValueError(f"min_observations must be an int >= 1, got {self.min_observations!r}")


@dataclass(frozen=True)
class CorrectionTable:
    """Frozen correction factors: measured / predicted time per (degree, algo)."""

    factors: Mapping[Key, float] = field(default_factory=dict)
    """(degree, algo) -> factor, for the keys with enough observations."""
    default: float = 1.0
    """Factor of every other key (the pooled factor once anything was observed)."""

    def __post_init__(self) -> None:
        for (degree, algo), value in self.factors.items():
            if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
                raise ValueError(f"correction key degree must be an int >= 1, got {degree!r}")
            if algo not in ALGOS:
                raise ValueError(f"correction key algo must be one of {list(ALGOS)}, got {algo!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"correction factor of ({degree}, {algo}) must be finite and > 0, got {value!r}")
        if not (math.isfinite(self.default) and self.default > 0):
            raise ValueError(f"default correction factor must be finite and > 0, got {self.default!r}")
        # Dense per-algo lookup arrays for the vectorised cost-model calls.
        top = max((d for d, _ in self.factors), default=0)
        dense = {}
        for algo in ALGOS:
            row = np.full(top + 1, self.default)
            for (degree, key_algo), value in self.factors.items():
                if key_algo == algo:
                    row[degree] = value
            dense[algo] = row
        object.__setattr__(self, "_dense", dense)

    @property
    def is_identity(self) -> bool:
        """Whether every factor is 1."""
        return self.default == 1.0 and all(v == 1.0 for v in self.factors.values())

    def factor(self, degree: int, algo: str) -> float:
        """The factor of one (degree, algo)."""
        return float(self.factors.get((int(degree), algo), self.default))

    def factor_array(self, degrees: np.ndarray, algo: str) -> np.ndarray:
        """Factors of an int array of degrees (any shape) for one algo."""
        row = self._dense[algo]  # type: ignore[attr-defined]
        out = np.full(degrees.shape, self.default)
        known = degrees < row.size
        out[known] = row[degrees[known]]
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON document: version, default factor and one entry per key (sorted)."""
        return {"version": CALIBRATION_VERSION, "default": self.default,
                "factors": [{"degree": d, "algo": a, "factor": f} for (d, a), f in sorted(self.factors.items())]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "CorrectionTable":
        """Inverse of `to_json`; a wrong document raises ValueError naming the field."""
        _check_version(doc)
        entries = doc.get("factors")
        if not isinstance(entries, list):
            raise ValueError(f"correction table field 'factors' must be a list, got {entries!r}")
        factors = {}
        for index, entry in enumerate(entries):
            try:
                factors[(entry["degree"], entry["algo"])] = float(entry["factor"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"correction table field 'factors[{index}]' must hold degree, algo and factor, "
                                 f"got {entry!r}") from exc
        return cls(factors, float(doc.get("default", 1.0)))


def _check_version(doc: Any) -> None:
    if not isinstance(doc, Mapping):
        raise ValueError(f"a calibration document must be a JSON object, got {type(doc).__name__}")
    if doc.get("version") != CALIBRATION_VERSION:
        raise ValueError(f"calibration field 'version' must be {CALIBRATION_VERSION}, got {doc.get('version')!r}")


@dataclass(frozen=True)
class Observation:
    """One measured group time and what the model said about it (a plan-log record)."""

    degree: int
    """Ranks of the group."""
    algo: str
    """Attention algo of the group."""
    base_ms: float
    """Prediction of the uncorrected cost model."""
    predicted_ms: float
    """Prediction the plan used (corrected by the factors of that time)."""
    measured_ms: float
    """What the group took."""


class OnlineCalibrator:
    """Smoothed measured / predicted ratios per (degree, algo) and pooled; see the module docstring."""

    def __init__(self, settings: CalibrationSettings = CalibrationSettings()) -> None:
        self.settings = settings
        self._log: dict[Key, float] = {}
        self._count: dict[Key, int] = {}
        self._pooled_log = 0.0
        self._pooled_count = 0

    @property
    def observations(self) -> int:
        """Observations fed so far."""
        return self._pooled_count

    def observe(self, degree: int, algo: str, base_ms: float, measured_ms: float) -> None:
        """Feed one group: its uncorrected predicted time and its measured time."""
        if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
            raise ValueError(f"degree must be an int >= 1, got {degree!r}")
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {list(ALGOS)}, got {algo!r}")
        for name, value in (("base_ms", base_ms), ("measured_ms", measured_ms)):
            if not (isinstance(value, (int, float, np.floating)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite time > 0, got {value!r}")
        s = self.settings
        ratio = math.log(min(max(measured_ms / base_ms, s.min_factor), s.max_factor))
        key = (int(degree), algo)
        self._log[key] = self._smoothed(self._log.get(key), self._count.get(key, 0), ratio)
        self._count[key] = self._count.get(key, 0) + 1
        self._pooled_log = self._smoothed(self._pooled_log, self._pooled_count, ratio)
        self._pooled_count += 1

    def _smoothed(self, old: float | None, count: int, ratio: float) -> float:
        if count == 0 or old is None:
            return ratio
        return (1.0 - self.settings.smoothing) * old + self.settings.smoothing * ratio

    def snapshot(self) -> CorrectionTable:
        """The current factors, frozen."""
        default = math.exp(self._pooled_log) if self._pooled_count else 1.0
        factors = {key: math.exp(value) for key, value in self._log.items()
                   if self._count[key] >= self.settings.min_observations}
        return CorrectionTable(factors, default)

    def to_json(self) -> dict[str, Any]:
        """The calibrator's whole state, to resume it later."""
        return {"version": CALIBRATION_VERSION, "settings": dataclasses.asdict(self.settings),
                "pooled": {"log_factor": self._pooled_log, "count": self._pooled_count},
                "keys": [{"degree": d, "algo": a, "log_factor": self._log[(d, a)], "count": self._count[(d, a)]}
                         for d, a in sorted(self._log)]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "OnlineCalibrator":
        """Inverse of `to_json`; a wrong document raises ValueError naming the field."""
        _check_version(doc)
        try:
            calibrator = cls(CalibrationSettings(**doc["settings"]))
            calibrator._pooled_log = float(doc["pooled"]["log_factor"])
            calibrator._pooled_count = int(doc["pooled"]["count"])
            for entry in doc["keys"]:
                key = (int(entry["degree"]), str(entry["algo"]))
                if key[1] not in ALGOS:
                    raise ValueError(f"unknown algo {key[1]!r}")
                calibrator._log[key] = float(entry["log_factor"])
                calibrator._count[key] = int(entry["count"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"calibration state is missing or has a wrong field: {exc!r}") from exc
        return calibrator


@dataclass(frozen=True)
class CalibratedTable(ProfileTable):
    """A profile table travelling with the correction factors of the model built from it."""

    corrections: CorrectionTable = field(default_factory=CorrectionTable)
    """Factors applied to every group time of the cost model."""


class CalibratedCostModel(CostModel):
    """`CostModel` whose group times are multiplied by per (degree, algo) correction factors.

    Built from a `CalibratedTable` (see `calibrated`); the same constructor as `CostModel`, so code
    that makes a sibling with `type(cost)(cost.table, ...)` keeps the factors. Every time query
    (`group_time_ms`, `best_time_ms`, `best_time_table`) goes through the corrected per-algo times,
    so the best algo is chosen on corrected times.
    """

    def __init__(self, table: ProfileTable, *, max_tokens_per_rank: int | None = None,
                 algos: Sequence[str] = ALGOS, memory_limited: bool = True) -> None:
        super().__init__(table, max_tokens_per_rank=max_tokens_per_rank, algos=algos, memory_limited=memory_limited)
        self.corrections: CorrectionTable = (table.corrections if isinstance(table, CalibratedTable)
                                             else CorrectionTable())
        """Factors applied to the group times."""
        plain = {f.name: getattr(table, f.name) for f in dataclasses.fields(ProfileTable)}
        self.base = CostModel(ProfileTable(**plain), algos=self.algos, memory_limited=memory_limited,
                              max_tokens_per_rank=self.capacity_tokens if memory_limited else None)
        """The same model without corrections."""

    @classmethod
    def calibrated(cls, base: CostModel, corrections: CorrectionTable) -> "CalibratedCostModel":
        """`base` (its table, capacity and algos) with `corrections` applied."""
        plain = {f.name: getattr(base.table, f.name) for f in dataclasses.fields(ProfileTable)}
        return cls(CalibratedTable(**plain, corrections=corrections), algos=base.algos,
                   memory_limited=base.memory_limited,
                   max_tokens_per_rank=base.capacity_tokens if base.memory_limited else None)

    def uncorrected_time_ms(self, workload: GroupWorkload, degrees: Any, algo: str, *, node_part: int | None = None,
                            ulysses_degree: int | None = None) -> np.ndarray | float:
        """The base model's group time (what the factors multiply); `node_part`, `ulysses_degree` as in
        `group_time_ms`."""
        return self.base.group_time_ms(workload, degrees, algo, node_part=node_part, ulysses_degree=ulysses_degree)

    def _algo_times(self, columns: WorkloadColumns, d_int: np.ndarray, algo: str,
                    node_part: int | None = None, ulysses_degree: int | None = None) -> np.ndarray:
        # The one hook every time query of CostModel goes through (a hybrid group's factor is its degree's
        # whatever its split: the splits' relative times stay the model's).
        times = super()._algo_times(columns, d_int, algo, node_part, ulysses_degree)
        if self.corrections.is_identity:
            return times
        return times * self.corrections.factor_array(d_int, algo)


def observe_groups(calibrator: OnlineCalibrator, cost: CostModel, groups: Sequence[tuple[GroupWorkload, int, str]],
                   measured_ms: Sequence[float],
                   placements: Sequence[tuple[int | None, int | None]] | None = None) -> list[Observation]:
    """Feed measured group times; returns the plan-log records (base, predicted, measured).

    `groups` are (workload, degree, algo) of the groups that ran, `measured_ms` their times (the
    slowest rank of each group). `cost` is the model the plan was made with (corrected or not).
    `placements`: (node part, hybrid u) of each group, priced where it ran (`group_time_ms`); default compact.
    """
    if len(groups) != len(measured_ms) or (placements is not None and len(placements) != len(groups)):
        raise ValueError(f"{len(groups)} groups but {len(measured_ms)} measured times")
    records = []
    for k, ((workload, degree, algo), measured) in enumerate(zip(groups, measured_ms)):
        node_part, ulysses = (None, None) if placements is None else placements[k]
        predicted = float(cost.group_time_ms(workload, degree, algo, node_part=node_part, ulysses_degree=ulysses))
        base = float(cost.uncorrected_time_ms(workload, degree, algo, node_part=node_part, ulysses_degree=ulysses)) \
            if isinstance(cost, CalibratedCostModel) else predicted
        calibrator.observe(degree, algo, base, float(measured))
        records.append(Observation(degree, algo, base, predicted, float(measured)))
    return records


def observe_round(calibrator: OnlineCalibrator, cost: CostModel, groups: Sequence[tuple[GroupWorkload, int, str]],
                  measured_round_ms: float) -> Observation:
    """Feed a round known only by its total time: it is charged to the group predicted slowest.

    A round lasts as long as its slowest group, so its time says most about that group; the
    others only finished earlier. Prefer `observe_groups` when per-group times are available.
    """
    if not groups:
        raise ValueError("a round needs at least one group")
    predicted = [float(cost.group_time_ms(w, d, a)) for w, d, a in groups]
    critical = int(np.argmax(predicted))
    return observe_groups(calibrator, cost, [groups[critical]], [measured_round_ms])[0]
