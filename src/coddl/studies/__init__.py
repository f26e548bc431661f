"""Hyperparameter-tuning studies: many trials of one training script, each a coddl job.

``spec`` reads the study file (search space, trials, Optuna's sampler and pruner); ``runner`` runs
it against a server, Optuna asking for trials and pruning the losers, coddl scheduling the trials
beside every other job. Optuna is imported only here, so the rest of coddl does not pay for it.
"""

from coddl.studies.runner import CoddlObjective, StudyError, StudyResult, TrialFailed, TrialRecord, run_study
from coddl.studies.spec import Parameter, StudyFile, load_study

__all__ = ["CoddlObjective", "Parameter", "StudyError", "StudyFile", "StudyResult", "TrialFailed", "TrialRecord",
           "load_study", "run_study"]
