"""What the planner reads: a frozen `PlannerPolicy`, built from Settings at the edge
(`Settings.planner_policy()`), so the pure planner never depends on settings loading.

The fields and their meaning are documented once, on the Settings fields of the same
name (autoscaler/settings.py); the defaults here are the same (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GrowthPolicy(StrEnum):
    FILL = "fill"
    FAIR = "fair"


class VictimOrder(StrEnum):
    MOST_WORKERS = "most-workers"
    LEAST_WORK_LOST = "least-work-lost"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerPolicy:
    """The planner's section of the settings (Settings.planner_policy()): the third
    argument of plan(), so that a plan depends on nothing but its inputs."""

    cooldown_seconds: float = 300
    cooldown_restart_cost_factor: float = 10.0
    reclaim_cooldown_seconds: float = 60
    reclaim_payoff_factor: float = 1.0
    max_gang_wait_seconds: float = 1800
    starving_gang_blocks_later_gangs: bool = False
    unplaced_timeout_seconds: float = 300
    no_pods_timeout_seconds: float = 300
    growth_policy: GrowthPolicy = GrowthPolicy.FILL
    min_step_workers: int = 1
    reserve_gpus_per_queue: int = 0
    growth_payoff_factor: float = 0.0
    restart_cost_seconds: float = 30
    reclaim_from_higher_priority: bool = True
    victim_order: VictimOrder = VictimOrder.MOST_WORKERS
    clock_skew_seconds: float = 120
    grow_without_min_available: bool = False
    # the capacity plugin's ancestorReclaimLevel (lenders.py: which cousins may give back)
    capacity_ancestor_reclaim_level: int = 0

    def cooldown_for(self, restart_cost: float) -> float:
        """Seconds after our resize before a job is grown again: at least
        cooldown_seconds, longer for a job whose restart costs more."""
        return max(self.cooldown_seconds, self.cooldown_restart_cost_factor * restart_cost)

    def __post_init__(self) -> None:
        # accept the settings' spelling ("fair") as Settings does
        object.__setattr__(self, "growth_policy", GrowthPolicy(self.growth_policy))
        object.__setattr__(self, "victim_order", VictimOrder(self.victim_order))
