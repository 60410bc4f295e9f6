"""The ordered plan: :data:`~memfit.advise.remedies.REMEDY_ORDER` applied one after the other to the user's run
until the step fits the target by :mod:`memfit.estimate.fits`' rule, the one ``memfit estimate`` prints.

Each remedy proposes options, least drastic first; the plan takes the first that fits (else the last, the
most it can do) and records a :class:`~memfit.advise.result.FitStep`. A remedy that does not apply, proposes
the run as it is, or saves less than 0.5% of the budget (at least 1 MiB) is listed as
:class:`~memfit.advise.result.Skipped` with its reason.
"""

from __future__ import annotations

from memfit.advise.cache import PeakCache
from memfit.advise.remedies import REMEDY_ORDER, Context, NotApplicable, Remedy
from memfit.advise.result import FitStep, Skipped
from memfit.advise.setup import Setup
from memfit.estimate.fits import Target
from memfit.units import BYTES_PER_MIB

MIN_SAVING_SHARE = 0.005  # a step must save at least this share of the budget to be taken ...
MIN_SAVING_BYTES = BYTES_PER_MIB  # ... and at least 1 MiB


class OrderedPlan:
    """The remedies applied in order: the current setup, its peak per GPU, the steps taken and skipped."""

    def __init__(self, cache: PeakCache, target: Target, ctx: Context) -> None:
        self.cache, self.target, self.ctx = cache, target, ctx
        self.current = ctx.initial
        self.peak = cache.peak(ctx.initial.spec)
        self.steps: list[FitStep] = []
        self.skipped: list[Skipped] = []
        self.min_saving = max(MIN_SAVING_BYTES, int(target.budget_bytes * MIN_SAVING_SHARE))

    def fits_setup(self, setup: Setup) -> bool:
        return self.cache.fits(self.target, setup.spec)

    @property
    def fits(self) -> bool:
        return self.cache.fits(self.target, self.current.spec)

    def run(self, remedies: tuple[Remedy, ...] = REMEDY_ORDER) -> None:
        """Apply ``remedies`` in order until the current setup fits."""
        for remedy in remedies:
            if self.fits:
                return
            self.apply(remedy)

    def apply(self, remedy: Remedy) -> None:
        """Take ``remedy``'s first fitting option (else its last), or list why it was skipped."""
        options = remedy.options(self.current, self.ctx)
        if isinstance(options, NotApplicable):
            self.skipped.append(Skipped(action=remedy.name, reason=options.reason, facts=options.facts))
            return
        chosen = next((o for o in options if self.fits_setup(o)), options[-1])
        if chosen == self.current:
            self.skipped.append(Skipped(action=remedy.name, reason="no_change"))
            return
        peak = self.cache.peak(chosen.spec)
        saved = self.peak - peak
        if saved < self.min_saving:
            self.skipped.append(Skipped(action=remedy.name, reason="saves_too_little", facts={"saved_bytes": saved}))
            return
        effect = remedy.effect(self.current, chosen, self.ctx)
        self.steps.append(FitStep(action=remedy.name, setup=chosen, peak_bytes=peak, saved_bytes=saved,
                                  time_factor=effect.time_factor, gives_up=effect.gives_up, facts=effect.facts,
                                  fits=self.cache.fits(self.target, chosen.spec),
                                  reserved_bytes=self.cache.reserved(chosen.spec)))
        self.current, self.peak = chosen, peak
