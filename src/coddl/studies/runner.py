"""Running a study: Optuna decides what to try and what to stop, coddl runs every trial as a job.

Each trial is an ordinary coddl job of the study's owner (``<study>-<n>``), so the cluster's policy
places and resizes it beside everything else: while trials are fewer than GPUs an elastic policy gives
each more of them, and a trial the pruner stops is cancelled at once, which frees its GPUs for the
survivors in the same scheduling pass (Fluid's resource-aware trial execution; the event log shows
the survivors' grows). The objective is the loss the trial passes to ``s.step``: its progress reports
are the intermediate values the pruner compares (at the step each report was made), and its last one
is the trial's value.

The same objective works in a user's own Optuna code::

    objective = CoddlObjective(endpoint, job_template, space)
    study = optuna.create_study(pruner=optuna.pruners.HyperbandPruner())
    study.optimize(objective, n_trials=20, n_jobs=4, catch=(TrialFailed,))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from coddl.runtime.client import Client, ClientError, Endpoint
from coddl.runtime.spec import JobFile
from coddl.studies.spec import Parameter, Pruner, Sampler, StudyFile

POLL_S = 0.5


class StudyError(ValueError):
    """A study that cannot be opened as asked (a storage URL Optuna cannot use, a stored study of the
    same name with another direction): one line, naming the option."""


class TrialFailed(RuntimeError):
    """The trial's job ended without finishing (failed, or cancelled by someone else), or its loss
    diverged: ``run_study`` records the trial as failed and goes on, as ``study.optimize`` does with
    ``catch=(TrialFailed,)``."""


@dataclass
class TrialRecord:
    """What the study's table shows of one trial."""

    number: int
    params: dict[str, Any]
    job_id: int | None = None
    state: str = "running"
    value: float | None = None
    steps: int = 0
    message: str = ""
    gpu_hours: float = 0.0  # what its job has held so far (the server's attained service)


def suggest(trial: optuna.Trial, name: str, p: Parameter) -> Any:
    """The trial's value of one parameter, from Optuna's distribution for its kind."""
    if p.choices is not None:
        return trial.suggest_categorical(name, p.choices)
    if p.integer:
        return trial.suggest_int(name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(name, float(p.low), float(p.high), step=p.step, log=p.log)


def env_value(v: Any) -> str:
    """A parameter as its environment variable's text (``repr`` keeps a float's every digit)."""
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(v) if isinstance(v, float) else str(v)


def make_pruner(p: Pruner, steps: int | None) -> optuna.pruners.BasePruner:
    if p.kind == "successive-halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=p.min_resource, reduction_factor=p.reduction_factor)
    if p.kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=p.min_resource, max_resource=steps or "auto",
                                              reduction_factor=p.reduction_factor)
    if p.kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.min_resource)
    if p.kind == "threshold":
        return optuna.pruners.ThresholdPruner(lower=p.lower, upper=p.upper, n_warmup_steps=p.min_resource)
    return optuna.pruners.NopPruner()


def make_sampler(s: Sampler) -> optuna.samplers.BaseSampler:
    if s.kind == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    return optuna.samplers.TPESampler(seed=s.seed)


class TrialRun:
    """One trial's job as the study follows it: the losses it reported so far go to Optuna as
    intermediate values (at the step of each report), and its last one is the trial's value."""

    def __init__(self, trial: optuna.Trial, job: JobFile, space: dict[str, Parameter], prefix: str) -> None:
        self.trial = trial
        params = {name: suggest(trial, name, p) for name, p in space.items()}
        self.record = TrialRecord(trial.number, params)
        self.job = job.model_copy(update={"name": f"{prefix}-{trial.number}"[:64],
                                          "env": {**job.env, **{k: env_value(v) for k, v in params.items()}}})
        self._reported: set[int] = set()
        self._last: float | None = None

    def submit(self, client: Client) -> None:
        self.record.job_id = int(client.submit(self.job)["id"])
        self.trial.set_user_attr("coddl_job", self.record.job_id)

    def advance(self, client: Client) -> bool:
        """Look at the job once; True when the trial is over (``record.state`` says how: finished,
        pruned — its job cancelled here — or failed). A loss that stops being a number after it was one
        (the server sends a NaN as nothing) is a diverged run: Optuna gets NaN, which every pruner
        prunes, and a trial that ends that way has failed rather than finished on a stale value."""
        rec = self.record
        view = client.job(rec.job_id)
        fresh = False
        for s in view.get("samples", []):
            loss, step = s.get("loss"), int(s["step"])
            if step in self._reported or (loss is None and self._last is None):
                continue  # already told, or a job that reports no loss (yet)
            value = float(loss) if loss is not None and math.isfinite(loss) else math.nan
            self.trial.report(value, step)
            self._reported.add(step)
            self._last, fresh = value, True
            rec.steps = max(rec.steps, step)
        rec.steps = max(rec.steps, int(view.get("steps_done") or 0))
        rec.gpu_hours = float(view.get("attained_service") or 0.0) / 3600
        if view["terminal"]:
            if view["status"] == "finished" and self._last is not None and math.isfinite(self._last):
                rec.state, rec.value = "finished", self._last
            else:
                rec.state = "failed"
                rec.message = (f"job {rec.job_id} {view['status']}" + (f": {view['message']}" if view.get("message") else "")
                               if view["status"] != "finished" else f"job {rec.job_id} reported no loss"
                               if self._last is None else f"job {rec.job_id}'s loss diverged (not a number)")
            return True
        if fresh and self.trial.should_prune():
            self._cancel(client)
            rec.state = "pruned"
            rec.message = f"pruned at step {rec.steps}" + (" (its loss diverged)" if not math.isfinite(self._last) else "")
            return True
        return False

    def _cancel(self, client: Client) -> None:
        """Cancel the job; one that ended meanwhile (409) is over already."""
        try:
            client.cancel(self.record.job_id)
        except ClientError as e:
            if e.status != 409:
                raise

    def stop(self, client: Client, why: str) -> None:
        """Cancel the trial's job (the study is being stopped); never raises, so that stopping one
        trial cannot keep the others running."""
        if self.record.job_id is not None:
            try:
                self._cancel(client)
            except ClientError as e:
                why = f"{why}; its job {self.record.job_id} may still run: {e}"
        self.record.state, self.record.message = "stopped", why


@dataclass
class CoddlObjective:
    """An Optuna objective that runs each trial as a coddl job on the server at ``endpoint``; for a
    user's own ``study.optimize`` (any ``n_jobs``: each call has its own connection). A trial whose job
    fails raises TrialFailed: pass ``catch=(TrialFailed,)`` to ``optimize`` so that the study goes on."""

    endpoint: Endpoint
    job: JobFile
    space: dict[str, Parameter]
    poll_s: float = POLL_S

    def __call__(self, trial: optuna.Trial) -> float:
        run = TrialRun(trial, self.job, self.space, self.job.name)
        with Client(self.endpoint) as client:
            run.submit(client)
            try:
                while not run.advance(client):
                    time.sleep(self.poll_s)
            except BaseException:
                run.stop(client, "the objective was interrupted")
                raise
        rec = run.record
        if rec.state == "pruned":
            raise optuna.TrialPruned(rec.message)
        if rec.state != "finished":
            raise TrialFailed(rec.message)
        return float(rec.value)


@dataclass
class StudyResult:
    """A study's outcome: every trial this run started, and the best finished one of the whole study
    (None when none finished)."""

    name: str
    direction: str
    trials: list[TrialRecord]
    best: TrialRecord | None
    wall_s: float


def _tell(study: optuna.Study, run: TrialRun) -> None:
    rec = run.record
    if rec.state == "finished":
        study.tell(run.trial, rec.value)
    elif rec.state == "pruned":
        study.tell(run.trial, state=optuna.trial.TrialState.PRUNED)
    else:
        study.tell(run.trial, state=optuna.trial.TrialState.FAIL)


def open_study(spec: StudyFile, job: JobFile, storage: str | None) -> optuna.Study:
    """The Optuna study, new or (with ``storage``) continued; StudyError when it cannot be."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler, pruner = make_sampler(spec.sampler), make_pruner(spec.pruner, job.steps)
    try:
        study = optuna.create_study(study_name=spec.name, storage=storage, load_if_exists=storage is not None,
                                    direction=spec.direction, sampler=sampler, pruner=pruner)
    except Exception as e:  # SQLAlchemy's and Optuna's own errors for a bad URL or an unusable database
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StudyError(f"--storage: cannot open {_shown(storage)}: {why}") from None
    if study.direction.name.lower() != spec.direction:
        raise StudyError(f"--storage: the stored study {spec.name!r} is to {study.direction.name.lower()}, "
                         f"this file says {spec.direction}")
    if not study.trials:  # a continued study has tried them already
        for config in spec.enqueue:
            study.enqueue_trial(config)
    return study


def _shown(url: str | None) -> str:
    """A storage URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    try:
        return repr(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not a URL at all: nothing in it to hide
        return repr(url)


DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def run_study(spec: StudyFile, job: JobFile, endpoint: Endpoint, *, storage: str | None = None,
              on_change: Callable[[TrialRecord], None] = lambda _r: None, poll_s: float = POLL_S) -> StudyResult:
    """Run the study to its end: ``spec.trials`` trials, ``spec.in_flight`` at a time, asked of Optuna
    and told their outcome one by one (its ask-and-tell interface, in this one thread). With
    ``storage`` (an Optuna database URL such as ``sqlite:///study.db``) a study of the same name
    continues where it stopped: only the trials still missing are run (those that failed or were
    interrupted are run again). On Ctrl-C the trials in flight are cancelled and recorded as failed
    before the interrupt goes on."""
    study = open_study(spec, job, storage)
    todo = max(spec.trials - sum(t.state in DONE for t in study.trials), 0)
    flying: list[TrialRun] = []
    records: list[TrialRecord] = []
    t0 = time.monotonic()
    with Client(endpoint) as client:
        try:
            while todo or flying:
                while todo and len(flying) < spec.in_flight:
                    run = TrialRun(study.ask(), job, spec.space, spec.name)
                    flying.append(run)  # before its submission, so that a refused one is told too
                    records.append(run.record)
                    run.submit(client)
                    todo -= 1
                    on_change(run.record)
                for run in list(flying):
                    steps = run.record.steps
                    if run.advance(client):
                        flying.remove(run)
                        _tell(study, run)
                        on_change(run.record)
                    elif run.record.steps != steps:
                        on_change(run.record)
                if flying:
                    time.sleep(poll_s)
        except BaseException as e:
            why = "the study was interrupted" if isinstance(e, KeyboardInterrupt) else f"the study stopped: {e}"
            for run in flying:
                run.stop(client, why)
                _tell(study, run)
                on_change(run.record)
            raise
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = None
    if done:
        b = study.best_trial
        best = next((r for r in records if r.number == b.number), None) or TrialRecord(
            b.number, dict(b.params), b.user_attrs.get("coddl_job"), "finished", b.value)
    return StudyResult(spec.name, spec.direction, records, best, time.monotonic() - t0)
