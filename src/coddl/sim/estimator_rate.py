"""A rate model that charges placement-dependent throughput with the analytic estimator.

``CurveRate`` charges P_m(k) × type speed whatever the placement. Real jobs are slower when their
GPUs are spread over nodes (the all-reduce leaves NVLink for the network) or mix GPU types (every
GPU waits for the slowest unless the batch is balanced). ``EstimatorRate`` keeps the measured
curves as the truth for the placement they describe and borrows only *ratios* from the estimator:

    rate(m, placement) = P_m(k) · type_speed[t*, m] · est(placement) / est(consolidated k on t*)

where t* is the placement's fastest type for m. A consolidated placement therefore reproduces the
measured curve (× type speed) exactly, a spread one is slower by the estimator's spread ÷
consolidated ratio, and a mixed one by what the slower GPUs cost: with ``allow_mixing`` the job
balances its per-GPU batch to speed (CoDDL's load balancing), otherwise every GPU processes the same
local batch and waits for the slowest.

Each curve model becomes an estimator job (``JobModel``): its one-GPU step 1/P_m(1) at the
model's fixed global batch, a fixed share f of that step that does not shrink with the local batch,
the model's published gradient bytes (``MODEL_PARAMS``) all-reduced over the cluster's fabric, and
the prior's communication efficiency and overlap. f is fitted per model so that the estimator's
consolidated curve on this cluster follows the measured curve's shape (least squares in log time
over the measured k): the estimator thus explains the curve with this cluster's links before it is
asked about other placements.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from coddl.core.cluster import Cluster
from coddl.perf.convert import POLLUX_PARAMS
from coddl.perf.curves import CurveTable
from coddl.perf.estimator import Estimator, Placement
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.heterogeneity import reference_type

# Parameters all-reduced per step (fp32 gradients, 4 bytes each), by curve-model family.
# Published sizes: VGG-16 138M, GoogLeNet 6.8M, Inception-v4 42.7M, ResNet-50 25.6M, DeepSpeech2 38M
# (as in perf/profiles.py), Transformer-base 65M. Approximate, as the CoDDL profiles do not record the
# configuration: DCGAN 6.4M (64×64 generator + discriminator), a seq2seq LSTM chatbot 30M, a CDNA-style
# video-prediction network 12M, a DeepRecommender-style autoencoder over ~18k items 20M.
MODEL_PARAMS: dict[str, float] = {
    "VggnetModel": 138e6, "GooglenetModel": 6.8e6, "Inception4Model": 42.7e6, "Resnet50Model": 25.6e6,
    "DeepspeechModel": 38e6, "TransformerModel": 65e6, "DcganModel": 6.4e6, "ChatbotModel": 30e6,
    "VideopredictionModel": 12e6, "AutoencoderModel": 20e6,
}
DEFAULT_PARAMS = 25.6e6  # a model nothing is known about: ResNet-50 sized
FIXED_SHARE_GRID = np.linspace(0.0, 0.95, 96)


def model_params(name: str) -> float:
    """Parameters of a curve model (``pollux-<app>@<batch>`` curves use Pollux's model sizes)."""
    if name.startswith("pollux-"):
        app = name[len("pollux-"):].partition("@")[0]
        if app in POLLUX_PARAMS:
            return POLLUX_PARAMS[app]
    base = name.rstrip("0123456789")
    return MODEL_PARAMS.get(base, DEFAULT_PARAMS)


def curve_profile(name: str, curve: np.ndarray, max_gpus: int, estimator: Estimator,
                  gpus_per_node: int, prior: Prior | None = None) -> JobModel:
    """The estimator job of one curve model (see the module docstring); ``curve[k]`` is
    steps/s on k GPUs of the model's reference type, at a global batch taken as 1."""
    prior = prior or Prior()
    t1 = 1.0 / float(curve[1])
    k = np.arange(1, max(1, max_gpus) + 1)
    measured = 1.0 / curve[k]
    nbytes = 4.0 * model_params(name)
    ref = reference_type(name)

    def job(f: float) -> JobModel:
        theta = np.array(prior.mean, dtype=float)
        theta[0] = f
        return JobModel(name, nbytes, t1, 1.0, theta, prior.cov, prior, ref)

    nodes, per_node = -(-k // gpus_per_node), np.minimum(k, gpus_per_node)
    errors = [float(np.sum(np.log(estimator.rates(job(f), k, nodes, per_node, 1.0 / k, uncertainty=False)
                                  .steps_per_s * measured) ** 2)) for f in FIXED_SHARE_GRID]
    return job(float(FIXED_SHARE_GRID[int(np.argmin(errors))]))


@dataclass
class EstimatorRate:
    """Placement-dependent steps/s (a ``RateModel`` for ``SimExecutor``)."""

    cluster: Cluster
    curves: CurveTable
    type_speed: np.ndarray  # [t, m], as given to the scheduler
    allow_mixing: bool = False
    estimator: Estimator | None = None  # default: the cluster's links, ring all-reduce
    _profiles: list[JobModel] = field(default_factory=list, init=False, repr=False)
    _cache: dict = field(default_factory=dict, init=False, repr=False)  # (model, shape) → steps/s
    _node_size: np.ndarray = field(init=False, repr=False)  # [t]: GPUs of the type's largest node
    _node_of_gpu: list[int] = field(init=False, repr=False)
    _type_of_node: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.estimator is None:
            self.estimator = Estimator.for_cluster(self.cluster, balance=self.allow_mixing)
        names = self.cluster.type_names
        sizes = np.zeros(len(names), dtype=np.int64)
        np.maximum.at(sizes, self.cluster.node_type_index, [n.gpus for n in self.cluster.nodes])
        self._node_size = sizes
        self._node_of_gpu = self.cluster.node_of_gpu.tolist()
        self._type_of_node = [n.gpu_type for n in self.cluster.nodes]
        # the profile fit uses the largest node of the cluster: consolidated curves assume one
        fit_node = int(sizes.max())
        self._profiles = [curve_profile(name, self.curves.rate[m], int(self.curves.max_gpus[m]), self.estimator,
                                        fit_node) for m, name in enumerate(self.curves.names)]
        speeds = {(name, t): float(self.type_speed[i, m])
                  for m, name in enumerate(self.curves.names) for i, t in enumerate(names)}
        self.estimator = replace(self.estimator, type_speed=speeds | dict(self.estimator.type_speed))

    def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
        if not gpus:
            return 0.0
        per_node: dict[int, int] = {}
        for g in gpus:  # plain Python: a job holds a handful of GPUs, and this runs at every action
            node = self._node_of_gpu[g]
            per_node[node] = per_node.get(node, 0) + 1
        return self.shape_rate(model, tuple(per_node.values()), tuple(self._type_of_node[n] for n in per_node))

    def shape_rate(self, model: int, gpus_per_node: tuple[int, ...], gpu_types: tuple[str, ...]) -> float:
        """Steps/s of ``model`` on this shape (GPUs per node and their types): the placer's scorer."""
        key = (model, tuple(sorted((-c, t) for c, t in zip(gpus_per_node, gpu_types))))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._rate(model, Placement(gpus_per_node, gpu_types))
        return hit

    def _rate(self, model: int, placement: Placement) -> float:
        names = self.cluster.type_names
        idx = [names.index(t) for t in set(placement.gpu_types)]
        fastest = max(idx, key=lambda t: (self.type_speed[t, model], -t))
        k = placement.num_gpus
        consolidated = Placement.consolidated(k, int(self._node_size[fastest]), names[fastest])
        profile = self._profiles[model]
        ratio = self.estimator.throughput(profile, placement, 1.0) / self.estimator.throughput(profile, consolidated, 1.0)
        kk = min(k, self.curves.kmax)
        return float(self.curves.rate[model, kk] * self.type_speed[fastest, model] * ratio)
