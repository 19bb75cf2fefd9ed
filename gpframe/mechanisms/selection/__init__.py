"""Selection mechanisms: AboveThreshold / sparse vector, Report-Noisy-Max, and their accounting.

See ``docs/operations/monitoring.md`` and ``docs/noise.md`` (the Gaussian selection exception, noise
parameters and charges).

* Laplace AboveThreshold and sparse vector (``docs/operations/monitoring.md``):
  :func:`laplace_above_threshold`, :class:`LaplaceSVTRun` — exact discrete Laplace, ε charged
  ex-ante.
* Gaussian AboveThreshold (``docs/operations/monitoring.md``): :func:`gaussian_above_threshold`,
  :class:`GaussianATRun` — exact continuous normals (``docs/operations/monitoring.md``: exact
  normals), pure ex-post ε (:func:`eps_at_top`, :func:`eps_at_bottom`, :func:`at_run_reservation`),
  Zhu & Wang's (2020) ex-ante bound for comparison.
* Report-Noisy-Max (``docs/operations/monitoring.md``): :func:`gaussian_report_noisy_max` with its
  certified pure ε (:func:`eps_rnm`, :func:`sigma_for_eps_rnm`), :func:`laplace_report_noisy_max`.
* Subsampling (``docs/operations/monitoring.md``): :func:`poisson_subsample`, :func:`amplified_eps`.

Outputs are answer bits or an index only; no noisy value ever leaves these functions.
"""

from gpframe.mechanisms.selection._common import ATRelease, RNMRelease
from gpframe.mechanisms.selection.above_threshold import LaplaceSVTRun, laplace_above_threshold
from gpframe.mechanisms.selection.certified import (
    ATParams,
    amplified_eps,
    at_run_reservation,
    at_step_needs,
    bw18_eps,
    eps_at_bottom,
    eps_at_top,
    eps_rnm,
    laplace_at_accuracy,
    log_integral_bracket,
    sigma_for_eps_rnm,
    sigma_x_for_eps_at,
    svt_laplace_split,
    zw20_eps,
    zw20_rdp,
)
from gpframe.mechanisms.selection.gaussian_at import GaussianATRun, gaussian_above_threshold
from gpframe.mechanisms.selection.normal_exact import ExactNormal
from gpframe.mechanisms.selection.rnm import gaussian_report_noisy_max, laplace_report_noisy_max
from gpframe.mechanisms.selection.subsample import poisson_subsample

__all__ = [
    "ATParams",
    "ATRelease",
    "ExactNormal",
    "GaussianATRun",
    "LaplaceSVTRun",
    "RNMRelease",
    "amplified_eps",
    "at_run_reservation",
    "at_step_needs",
    "bw18_eps",
    "eps_at_bottom",
    "eps_at_top",
    "eps_rnm",
    "gaussian_above_threshold",
    "gaussian_report_noisy_max",
    "laplace_above_threshold",
    "laplace_at_accuracy",
    "laplace_report_noisy_max",
    "log_integral_bracket",
    "poisson_subsample",
    "sigma_for_eps_rnm",
    "sigma_x_for_eps_at",
    "svt_laplace_split",
    "zw20_eps",
    "zw20_rdp",
]
