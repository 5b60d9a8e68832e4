"""``curate prune``: remove redundant records down to a ratio.

``ratio`` is the fraction of records REMOVED (0.45 keeps 55%). Methods:

- ``redundancy``: records of one (hardware, task) whose schedules are identical, step for step and field for field
  (``schedule_keys``: the same schedule measured again, or the same up to bookkeeping that does not change the
  program: SSA names, GetBlock/GetLoops, the Split that replays a SamplePerfectTile) collapse into one record whose
  costs are the union of theirs (in a prune of a split's training part, the set's fastest member with its own
  costs, so that no held-out label moves).
- ``cluster``: per (hardware, task), k-means over the standardised flat features plus the standardised label
  (weight ``CLUSTER_LABEL_WEIGHT``); the record nearest each centre is kept, so the kept set covers the schedule
  space and the label range together. A task's pool of more than ``CLUSTER_BLOCK`` records is clustered in
  random blocks of that size (k shared in proportion), so the cost per record does not grow with the task
  (``benchmarks/prune.py``: K80's largest task cut to 250 ... 4000 records runs at 13,500-22,000 records/s; one
  k-means over all 4000 ran at 3,300). The label is a coordinate rather than a quartile stratum (the earlier
  design): on roller-k80 at ratio 0.7 (seeds 0 and 1, the proxy of ``evaluate_prune``), k-means in label-quartile
  strata kept PCA 0.8009/0.7981 (0.8006/0.7985 with the label as a coordinate too), features + label
  0.8045/0.8027, random 0.7963/0.7972. Where at least ``KCENTER_FROM`` (half) of a pool (block) stays, the
  representatives are picked farthest-first instead (greedy k-center, ``_kcenter_pick``, same coordinates): what
  goes is what lies nearest a kept record, the most redundant first (session 23, below).
- ``importance``: an out-of-fold LightGBM lambdarank proxy (2 folds per task: a record is scored by the model that
  did not see it) scores each record by its rank error; informative (hard) records are kept, with a floor of
  easy ones drawn at random so the label distribution does not collapse.
- ``random``: the control.
- ``density``: ``hybrid``'s first steps (duplicates merged, failed records out, the task's fastest programs for the
  share ``HYBRID_TOP_SHARE`` of its kept budget), then the rest drawn at random, so the kept set keeps the pool's
  density instead of covering its space. For the product's attention model (reports/prune_models.md, session 27):
  judged by that model rather than the proxy (``evaluate_prune.evaluate_methods(model="attention")``), hybrid's
  cluster representatives cost 0.02-1.29 PCA points against random pruning at 0.45 and 0.7 on all four real sets,
  and ``density`` beats hybrid on all eight (set, ratio) rows by 0.23-1.18 points and random on six (seeds 0-2).
  The attention model loses 1.1-2.3 PCA points at 0.45 and 2.7-4.6 at 0.7 whatever the method: it ranks better than
  the proxy on full data and needs more of it.
- ``hybrid`` (default): redundancy first, then failed records, then the task's fastest programs for the share
  ``HYBRID_TOP_SHARE`` of its kept budget, then cluster representatives for the rest (farthest-first where at least
  half the task stays, as in ``cluster``), mixed with importance picks
  in the share ``HYBRID_IMPORTANCE_SHARE``. Tuned on data (``benchmarks/prune.py``, 3 seeds, reports/prune.md):
  importance picks alone cost the proxy 2.0 (ratio 0.45) and 5.6 (0.7) PCA points against full data on roller-k80,
  cluster representatives 0.1 and 0.9, so the importance share is 0; dropping failed records before the
  clustering keeps 0.3 more top-1 points than ``cluster`` at 0.45. Top-1 is decided among a task's fastest
  programs, and k-means keeps one representative of the dense top of the label range where a ranker must tell
  near-equals apart: at 0.45 hybrid without the top share lost 0.2 (K80) and 1.0 (MI50) top-1 points. Mean over
  seeds 0-2, (PCA, top-1) against full data at ratio 0.45 / 0.7, top share 0 -> 0.05 -> 0.1 -> 0.15/0.2:
  roller-k80 0.45: (-0.03, -0.21) -> (-0.05, +0.06) -> (-0.25, +0.10) -> 0.15: (-0.32, +0.26);
  roller-k80 0.7: (-0.82, -1.23) -> (-0.94, -0.95) -> (-0.96, -0.06) -> 0.15: (-1.32, -0.45);
  roller-mi50 0.45: (-0.23, -1.01) -> (-0.37, 0.00) -> (-0.60, +0.68) -> 0.2: (-0.96, -0.31);
  roller-mi50 0.7: (-1.53, -1.89) -> (-1.37, -1.28) -> (-1.79, -1.26) -> 0.2: (-2.45, -1.17).
  A larger share buys top-1 with PCA (the kept set covers less of the schedule space); 0.05 is the share that
  keeps PCA within 0.15 points of share 0 on both sets while lifting top-1 on both. Tried and dropped (session 8):
  drawing a share of the rest at random after the k-means representatives, to keep the dense regions' density;
  roller-mi50 at 0.45, random share 0 -> 0.25 -> 0.5: PCA -0.37 -> -0.50 -> -0.52 points, top-1 0.00 -> -1.65 ->
  -0.72; at 0.7 PCA -1.37 -> -1.55 -> -1.75. The label weight in k-means (``CLUSTER_LABEL_WEIGHT``) 3 -> 1.5 / 6,
  (PCA, top-1) against full: roller-mi50 0.45 (-0.37, 0.00) -> (-0.42, +0.18) / (-0.40, -0.64), 0.7 (-1.37, -1.28)
  -> (-1.55, -0.62) / (-1.58, -1.82); roller-k80 0.45 (-0.05, +0.06) -> 1.5: (-0.10, -0.64): 3 stays.
  Tried in session 9 (``benchmarks/prune_sweep.py --set NAME=VALUE``): the kept budget per task in proportion to
  pool size**p (``HYBRID_ALLOCATION_POWER``; p < 1 moves budget from large tasks to small ones, on the idea that
  a large task's records repeat each other more) and a smaller top share. (PCA, top-1) against full, p 1 -> 0.75 -> 0.5:
  roller-mi50 0.45 (-0.37, 0.00) -> (-0.27, +0.28) -> (-0.35, -0.51); 0.7 (-1.37, -1.28) -> (-1.40, -1.40) ->
  (-1.20, -1.68); roller-k80 0.45 (-0.05, +0.06) -> 0.75: (-0.10, -0.20); 0.7 (-0.94, -0.95) -> (-1.05, -0.20).
  p = 0.75 meets MI50's 0.45 bar and loses K80's two (top-1 at 0.45, PCA at 0.7), so p stays 1 (every other
  method, the random control above all, always allocates in proportion). Top share 0.02 on roller-mi50: 0.45
  (-0.24, -0.66), 0.7 (-1.46, -1.39).
  The numbers above came from the float k-means on an AVX-512 machine. With k-means on its exact grid (session 11,
  any CPU; reports/prune*.md) the defaults give roller-k80 0.45 (-0.16, +0.10), 0.7 (-0.91, -0.38); roller-mi50
  0.45 (-0.39, -0.32), 0.7 (-1.47, -1.82): the same setting moved by up to 0.11 PCA and 0.57 top-1 points, the
  size of the seed noise, so differences of that size between settings above decide nothing.
  Tried in session 11 on the exact grid: k-means feature weights pulled towards |Spearman(feature, label)| within
  the task (features that order the task's programs count more in the coverage). (PCA, top-1) against full:
  roller-mi50 0.45 (-0.39, -0.32) -> (-0.50, +0.31), 0.7 (-1.47, -1.82) -> (-1.56, -0.68); roller-k80 0.45
  (-0.16, +0.10) -> (-0.12, +0.02), 0.7 (-0.91, -0.38) -> (-0.97, -1.41). It trades PCA for top-1 on MI50 and
  leaves MI50's PCA bars as far off, so it was dropped.
  Tried in session 13: kernel herding in place of the k-means representatives (greedy picks that make the kept
  set's RBF kernel mean, median-distance bandwidth, match the whole pool's over the same coordinates: a sample that
  keeps the pool's density rather than covering its space; throwaway script over ``benchmarks/prune_sweep.py``).
  (PCA, top-1) against full: roller-mi50 0.45 (-0.39, -0.32) -> (-0.64, -0.44), 0.7 (-1.47, -1.82) -> (-1.70,
  -1.18), random (-0.89, -1.02) and (-1.98, -2.63) in the same run. Closer to random on PCA; dropped.
  Also tried in session 13: coreset weights, each k-means representative weighted in the proxy's training by the
  pool records nearest to it (normalised to mean 1 per task; LightGBM's per-record weights), the pruned data kept
  as it is. (PCA, top-1) against full, unweighted -> weighted: roller-mi50 0.45 (-0.39, -0.32) -> (-0.27, +0.21),
  0.7 (-1.47, -1.82) -> (-1.62, -1.44); roller-k80 0.45 (-0.16, +0.10) -> (-0.05, -0.46), 0.7 (-0.91, -0.37) ->
  (-0.90, -0.62). It would meet MI50's 0.45 bar and lose K80's (top-1), the same trade as every knob above, and it
  would need a weights file next to the pruned shards that every trainer reads; not built.
  Tried in session 16 (throwaway scripts over ``evaluate_prune``, roller-mi50, seeds 0-2): error-driven completion
  (active learning): hybrid at 70% of each task's budget, then the proxy (200 trees) trained on that kept set and
  the rest of the budget filled with the task's records it mis-ranks most (label error after mapping the predicted
  rank onto the kept labels). At 0.7, (PCA, top-1) 0.8099 / 0.9404 against hybrid's 0.8119 / 0.9326; seeding 50%
  and filling in two rounds 0.8046 / 0.9271. Like ``importance``, records a model gets wrong teach the proxy less
  than coverage does; dropped. Two checks of the proxy itself: early stopping on 10% of the kept training records
  (the proxy has none) left 600 trees in almost every fit and moved nothing beyond a seed sd (seeds 0-1: full
  0.829 / 0.826 -> 0.828 / 0.825, hybrid 0.7 0.809 / 0.814 -> 0.805 / 0.811), so the loss at 0.7 is data, not
  over-fitting; and the product's own GBDT (``curate train --model gbdt`` defaults, within-task features over the
  kept records and the test records) reaches 0.844 PCA on full data but loses MORE to pruning: hybrid -0.77
  (0.45) and -2.04 (0.7) PCA points, random -0.92 and -1.98. A stronger ranker needs more of the data.
  Also session 16: the kept budget by task difficulty, each task's share in proportion to size x (1 - its
  out-of-fold proxy PCA)^b (2 folds, 200 trees; task PCA 0.61-1.00), the rest of hybrid unchanged. Mean PCA over
  seeds 0-2 against hybrid's proportional budget: b = 1 (more to the hard tasks) 0.45: -0.25 points, 0.7: -0.28;
  b = -1 (more to the easy ones) 0.45: -0.37, 0.7: -1.33. Proportional stays.
  Which records ``importance`` should keep (session 16, roller-mi50, seeds 0-2, mean PCA; random pruning 0.8177 at
  0.45 and 0.8068 at 0.7): the easiest by out-of-fold rank error 0.7609 / 0.7403; random among all but the hardest
  tenth of the pool 0.8033 / 0.7951; the product's 3/4 hardest + 1/4 random 0.8083 / 0.7634. Leaving out the
  hardest tenth costs 1.4 points against random, so those records carry what the rest does not (they are where
  the feature-to-label map is least smooth), yet a kept set made mostly of them loses the bulk of the space.
  Mixed into hybrid (``HYBRID_IMPORTANCE_SHARE`` 0 -> 0.1 -> 0.25; PCA / top-1 against full): 0.45 (-0.39, -0.32)
  -> (-0.21, -1.43) -> (-0.52, -1.59); 0.7 (-1.47, -1.82) -> (-1.55, -1.42) -> (-2.00, -1.28). The PCA bar at 0.45
  is met at 0.1 only by giving up more than a point of top-1: the share stays 0.
  k-means clusters as strata with a random member of each kept (session 16; the member nearest the centre is the
  most typical record, and typical records teach least, above): (PCA, top-1) against full, nearest -> random
  member: roller-k80 0.45 (-0.16, +0.10) -> (-0.21, +0.21), 0.7 (-0.91, -0.38) -> (-0.99, -0.38); roller-mi50 0.45
  (-0.39, -0.32) -> (-0.32, +0.18), 0.7 (-1.47, -1.82) -> (-1.47, -2.11); mmperf-a100 0.45 (-0.26, -0.15) -> (-0.35,
  -0.35), 0.7 (-1.78, -0.74) -> (-1.85, -0.33); bennu-a100-resnet34 (MetaSchedule) 0.45 (-0.22, -0.17) -> (-0.17,
  -0.05), 0.7 (-1.45, +0.24) -> (-1.17, +0.08). Better on two sets, worse on one, no bar met that was not: nearest
  stays (its selection is also the one the reports and tests pin).
  k-means over the schedule itself (session 17): the flat features are per-program means and maxima of the tile
  lengths, so two schedules that put the same tiles on different loops look alike; appending each token position's
  numeric parameters (extent, five tile lengths, unroll, list items; 64 positions, the block scaled to a given
  share of the flat block's variance, the label's weight raised to keep its share) to the k-means coordinates
  (throwaway script patching ``featurize`` and ``_cluster_select`` inside ``prune`` only). roller-mi50, (PCA,
  top-1) against full, default (-0.39, -0.32) at 0.45 and (-1.47, -1.82) at 0.7 in the same session: token block
  equal to the flat block (-0.46, -0.25) and (-1.69, -1.61); a quarter of it (-0.35, -1.17) and (-1.50, -0.51).
  Finer coverage of the schedule space teaches the proxy no more than the coarse one: dropped.
  Where the PCA lost at 0.7 sits (session 18, throwaway script over ``evaluate_prune``: per-task PCA of the proxy
  on full, hybrid and random training data, test-record-weighted shares of the loss in points). roller-mi50 seeds
  0 / 1 / 2, hybrid (random): conv2d -1.25 (-1.03) / -0.51 (-1.10) / -0.65 (-1.13), depthwise -0.56 (-0.59) /
  -0.43 (-0.71) / -0.45 (-0.68), dense -0.07 to -0.21, pooling, elementwise and reduction under 0.07 together;
  roller-k80 seed 0: conv2d -0.44 (-0.89), depthwise -0.41 (-0.61). 81 of MI50's 112 tasks have 600-1,200
  records in the pool and carry 96% of the loss (seed 0), so no budget moved between task sizes can recover it;
  the loss is spread over the convolution tasks, and on MI50 seed 0 hybrid lost more than random on them.
  Farthest-first where most of a task stays (session 23, ``KCENTER_FROM``; ``benchmarks/prune_sweep.py`` with
  ``_kmeans_pick`` swapped for a throwaway greedy k-center, then the product's rule). k-means minimises the mean
  distance to a kept record, so it keeps a representative of every dense region and thins the sparse ones;
  farthest-first minimises the largest distance, so when most records stay it drops the ones nearest a kept one:
  what it removes are near-repeats, what pruning at a low ratio should remove. (PCA, top-1) against full, mean over
  seeds 0-2, k-means -> farthest-first, ratio 0.45: roller-k80 (-0.16, +0.10) -> (+0.09, +0.04); roller-mi50
  (-0.39, -0.32) -> (-0.26, +0.26); mmperf-a100 (-0.26, -0.15) -> (-0.18, -0.69); bennu-a100-resnet34 (MetaSchedule)
  (-0.22, -0.17) -> (+0.01, -0.38): PCA better on all four sets, top-1 up on MI50 and down on the two A100 sets (by
  about their seed spread). roller-mi50 at 0.2 (+0.07, +0.47) -> (+0.10, +0.44) and at 0.55 (-0.61, -0.28) ->
  (-0.54, 0.00). The embedded CPU sample (MetaSchedule, 14 tasks of about 150 programs;
  ``--logs data/sample-cpu``, seeds 0-4) at 0.45 (-1.53, +2.66) -> (-0.78, +2.58), at 0.2 (-0.19, +1.56) -> (-0.63,
  +3.55); the pruned rows of reports/pca.md (one seed, models trained as the report trains them) moved both ways,
  by up to 7 PCA points (within-task attention 0.680 -> 0.610, network-wise MLP 0.534 -> 0.568). When most records
  go it is worse: at 0.7 roller-mi50 (-1.47, -1.82) -> (-1.90, -1.67), mmperf-a100
  (-1.78, -0.74) -> (-2.29, -0.89), bennu (-1.45, +0.24) -> (-2.00, -0.30): covering the sparse fringe (slow or
  odd programs) leaves the dense regions, where the test records are, under-represented; half k-means, half
  farthest-first at 0.7 on MI50 (-1.86, -0.76). Hence the switch at half the pool, the point where more of a region
  stays than goes; 0.45 (keeps 55%) and 0.7 (keeps 30%) lie either side of it. Between them, at 0.6 (keeps 40%;
  ``--set KCENTER_FROM=0.35`` against the default) roller-mi50 gives k-means (-0.93, -1.09), farthest-first (-0.95,
  -0.93): a tie, so the crossing lies near 40% and the switch at half errs towards k-means. Also tried in
  session 23 and dropped: half as many k-means clusters with two records each (the one nearest the centre and a
  partner: the member farthest from it in label, or a random member), to give the proxy a
  contrast within every region; roller-mi50 at 0.45 (-0.58, +0.96) / (-0.54, -0.06), at 0.7 (-1.72, -0.33) /
  (-1.59, -0.85): fewer regions cost more PCA than the pairs teach. Farthest-first is also cheaper than k-means
  (one pass over the block per pick, no Lloyd iterations): at 0.45 over roller-k80, ``cluster`` selects 130k
  records/s and ``hybrid`` 32k, against 31k and 19k with k-means (reports/prune.md, speed tables).
  Tried in session 24 and dropped: coordinates from per-pool ranks instead of standardised values (a tree ranker,
  the proxy included, sees a feature only through its order, and ranks stop a few heavy-tailed tile statistics
  from deciding the distances). (PCA, top-1) against full, seeds 0-2, standardised -> ranks: roller-k80 0.45
  (+0.09, +0.04) -> (-0.13, -0.29), 0.7 (-0.91, -0.38) -> (-0.89, -0.31); roller-mi50 0.45 (-0.26, +0.26) ->
  (-0.30, +1.32), 0.7 (-1.47, -1.82) -> (-1.32, -1.38); mmperf-a100 0.45 (-0.18, -0.69) -> (-0.14, +0.07), 0.7
  (-1.78, -0.74) -> (-1.82, -0.33); bennu 0.45 (+0.01, -0.38) -> (-0.05, -0.18), 0.7 (-1.45, +0.24) -> (-1.23,
  +0.58). The label as a rank too: roller-mi50 0.45 (-0.32, +0.21), 0.7 (-1.44, -1.54); ranks with label weight 5:
  (-0.18, +0.10), (-1.38, -1.46). It moves which sets meet the 0.45 bar (K80 out, mmperf-a100 in) by about the
  seed spread and leaves the second sets' 0.7 rows more than 0.2 points from the 1-point bar. Top share 0.05 -> 0.1 with
  farthest-first at 0.45: mmperf-a100 (-0.18, -0.69) -> (-0.21, +0.25), bennu (+0.01, -0.38) -> (+0.01, -0.25),
  share 0 on mmperf-a100 (-0.32, 0.00): again inside the seed spread of top-1 (paired sd 0.33 / 0.77 points).
  Over ten seeds (0-9) the defaults at 0.45 give mmperf-a100 (-0.36, -0.15) and bennu (-0.20, -0.43), random
  (-1.05, -0.88) and (-0.99, -0.78): the A100 sets' small loss is real, not a three-seed draw. Farthest-first for
  half the budget and the rest at random (to keep some of the dense regions' density): 0.45 roller-k80 (-0.33,
  +0.03), roller-mi50 (-0.30, +0.69), mmperf-a100 (-0.59, +0.22), bennu (-0.29, +0.14): top-1 for PCA again.
  Tried in session 26, ten seeds (0-9) at 0.45, against the defaults' mmperf-a100 (-0.36, -0.15) and bennu (-0.20,
  -0.43): the label coordinate stretched at the top, -log(1 - label + 0.02) before standardising, so that
  farthest-first tells the near-best programs apart where top-1 is decided (throwaway ``/tmp`` wrapper of
  ``benchmarks/prune_sweep.py`` replacing ``cluster_coordinates``' label column): mmperf-a100 (-0.48, +0.02), bennu
  (-0.28, -1.01); mmperf-a100 at 0.7 (k-means) (-1.94, -0.41) against the defaults' (-1.94, -0.70) over the same
  ten seeds (three seeds gave -1.78); the label weight for farthest-first (``--set CLUSTER_LABEL_WEIGHT=...``,
  tuned on k-means before): mmperf-a100 1.5 (-0.34, -0.27), 6 (-0.28, -0.22). k-means run to 30 Lloyd iterations
  instead of 8 (``_kmeans_pick``'s ``iters``), mmperf-a100 at 0.7: (-2.01, -0.82). Nothing outside the seed spread,
  no bar met. The defaults at 0.7 over ten seeds (``benchmarks/prune_sweep.py --ratios 0.7 --methods hybrid random
  --seeds 0 1 2 3 4 5 6 7 8 9``), hybrid (random): roller-mi50 (-1.35, -1.10) ((-1.91, -1.88)), margin over random
  +0.56 PCA points at a paired sd of 0.29; bennu-a100-resnet34 (-1.67, -0.15) ((-2.57, -1.36)); mmperf-a100 -1.94
  PCA (above). Three seeds had given -1.47, -1.45 and -1.78: no set comes within 0.3 points of the 1-point bar.

Invariants (checked): deterministic for a seed; every (hardware, task) keeps its best valid record and at least
``min_keep`` records (or all it has); the achieved ratio is within 1% of the request whenever the minimums allow,
and otherwise prune.json and the report say so and why (``ratio_warning``: the minimums, or identical schedules
merged, which remove records at ratio 0 too); the output has the record schema. The best record's label scale
holds unless re-measurements of its schedule merge into it and move its mean: prune.json and the report count
those tasks (``best_cost_moves``).

How it runs (``prune``): the dataset is cut into units of whole tasks (``plan_units``: shards that share a task are
one component; components are packed into units of about ``UNIT_RECORDS`` records). Pass 1 prepares each unit
(labels, features, duplicate keys) and returns only per-task pool counts; the kept budget is allocated over all
tasks in (hardware, task_id) order from those counts (``global_allocation``: proportional, largest remainder); pass 2
selects each unit's records and writes one shard per unit. Every task draws from its own random stream
(``task_rng``: seed and task key), so the result does not depend on the units, the executor or the worker count, and
``select`` (the same three steps on one in-memory frame, used by the evaluation) keeps the same records. Memory is
that of one unit per worker. The one exception: ``importance`` trains its proxy per unit. The dataset's per-task
tables (``SIDE_TABLES``: MetaSchedule workloads, network membership) are copied whole into the pruned dataset, so
it answers the same splits as its source, network-wise included. With a split (``prune(..., split=NAME)``, ``curate
prune --split``) only the split's training records are pruned: the split's training ids are read once and handed to
each unit (``_stage_split_by_unit``), the other records pass through both passes untouched, and the pruned dataset
gets the split restricted to its records, so a model trained on it is scored on the source's test records.
"""
from __future__ import annotations

import hashlib
import numbers
import os
import shutil
import time
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from .features import featurize
from .labels import LABEL_KEYS, with_labels
from .metrics import cap_queries
from .schema import RECORD_SCHEMA
from .splits import SPLIT_KEYS
from .storage import names_damaged_shard

METHODS = ["redundancy", "cluster", "importance", "hybrid", "density", "random"]
HYBRID_IMPORTANCE_SHARE = 0.0  # see the module docstring: importance picks hurt the proxy on real data
HYBRID_TOP_SHARE = 0.05  # share of a task's kept budget given to its fastest programs first (module docstring)
HYBRID_ALLOCATION_POWER = 1.0  # hybrid: kept records per task proportional to size**power (module docstring)
CLUSTER_LABEL_WEIGHT = 3.0  # the label's weight among the standardised k-means coordinates (module docstring)
CLUSTER_BLOCK = 1000  # a task's pool is clustered in random blocks of at most this many records (linear cost)
KCENTER_FROM = 0.5  # keeping at least this share of a pool: farthest-first (k-center) picks, not k-means (docstring)
UNIT_RECORDS = 20_000  # records per processing unit (whole tasks): bounds prune's memory whatever the input size
FEATURE_SLICE = 16_384  # rows featurized at once inside a unit
SIDE_TABLES = ("workloads", "networks")  # per-task tables of a dataset, copied whole into a pruned dataset


def record_files(dataset: Path) -> list[Path]:
    """A dataset's record shards, sorted; FileNotFoundError naming the dataset when it has none (or is no folder), a
    ``storage.DatasetBeingWritten`` warning while a writer holds it, ``storage.IncompleteDataset`` when they are not
    the shards its manifest names (an interrupted write)."""
    from .storage import check_readable

    if not Path(dataset).is_dir():
        raise FileNotFoundError(f"{dataset}: no such dataset folder")
    files = sorted((Path(dataset) / "records").glob("*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"{dataset}: no record shards under records/ ({_why_no_records(Path(dataset))})")
    check_readable(dataset, files)
    return files


def _why_no_records(dataset: Path) -> str:
    """What to do about a dataset folder without records: convert into it, or, when its manifest names inputs that
    gave no rows (network_info pickles alone give only the networks table), convert the measurement logs into it
    too (the manifest keeps what came before)."""
    from .convert import load_manifest
    from .storage import OutputError

    try:
        inputs = load_manifest(dataset)["inputs"]  # an empty manifest where it has none
    except (OSError, OutputError):
        inputs = {}
    if not inputs:
        return "run curate convert first"
    kinds = sorted({str(e.get("format")) for e in inputs.values() if isinstance(e, dict)})
    return (f"its {len(inputs)} converted input(s), of format {', '.join(kinds)}, gave no measurement records: "
            f"convert the logs into it too, curate convert LOGS --out {dataset}")


@names_damaged_shard()
def load_records(dataset: Path, columns: list[str] | None = None, where: pl.Expr | None = None,
                 sort: bool = True) -> pl.DataFrame:
    """A dataset's records sorted by (hardware, task_id, record_id) (``sort=False``: in shard order, without the
    sort's copy of the frame): ``columns`` only, and only the rows ``where`` holds (applied as each row group is
    read, so rows left out never sit in memory with their other columns)."""
    lf = pl.scan_parquet(record_files(dataset), hive_partitioning=False)
    if where is not None:
        lf = lf.filter(where)
    if columns is not None:
        lf = lf.select(columns)
    keys = [k for k in ("hardware", "task_id", "record_id") if k in lf.collect_schema().names()]
    # one lazy query: Polars sorts as it reads, where reading every shard and then sorting the whole frame held
    # both (2.0 -> 1.5 GB RSS on 180k real records, almost all of it the nested steps column)
    return lf.sort(keys, maintain_order=True).collect() if keys and sort else lf.collect()


def _group_index(df: pl.DataFrame) -> np.ndarray:
    return df.select(pl.struct(LABEL_KEYS).rank("dense") - 1).to_series().to_numpy().astype(np.int64)


def schedule_keys(steps: pl.Series, groups: np.ndarray) -> np.ndarray:
    """A 64-bit key per record: equal keys = same group and the same schedule, every field of every step (an Ansor
    step's stage, iterators, lengths, target loop; a MetaSchedule instruction's literals, attributes and decision),
    with the MetaSchedule instructions that carry no decision left out (``features.TOKEN_KINDS``: GetBlock,
    GetLoops, the Split that replays a SamplePerfectTile, EnterPostproc, ...) and SSA names dropped by the reader.
    So a trace re-measured, or written again with other SSA names or bookkeeping, is one schedule, and two
    programs are never one: keys over the feature tokens (``dedup_keys``, until session 30) missed a CA step's
    target loop, reorder orders and everything past 64 tokens, and merged real programs of different speed (the
    prune audit: bennu's x86 resnet-18, lines 101 and 105, 4.00 and 3.56 ms). blake2b over a text of the steps
    (Polars writes the numbers, so a Polars that formats floats otherwise would give other keys, not other
    duplicate sets)."""
    from .features import TOKEN_KINDS

    n = len(steps)
    keys = np.empty(n, dtype=np.uint64)
    if n == 0:
        return keys
    txt = lambda c: pl.col(c).list.eval(pl.element().cast(pl.Utf8)).list.join(",")  # noqa: E731
    ex = (pl.DataFrame({"steps": steps}).with_row_index("rid").explode("steps")
          .with_columns(pl.col("steps").struct.field("kind").alias("kind"))
          .filter(pl.col("kind").is_in(list(TOKEN_KINDS)) | pl.col("kind").is_null())
          .unnest("steps", separator=".")
          .select("rid", pl.concat_str([
              pl.col("kind").fill_null(""), txt("steps.ints"),
              pl.col("steps.lists").list.eval(pl.element().list.eval(pl.element().cast(pl.Utf8)).list.join(","))
              .list.join(";"),
              pl.col("steps.strs").list.join("\x1f"), txt("steps.floats")], separator="\x1e", ignore_nulls=True)
              .fill_null("").alias("s"))
          .group_by("rid", maintain_order=True).agg(pl.col("s").str.join("\x1d")))
    text = [""] * n
    for rid, s_ in ex.iter_rows():
        text[rid] = s_
    for i in range(n):
        h = hashlib.blake2b(text[i].encode(), digest_size=8)
        h.update(int(groups[i]).to_bytes(8, "little"))
        keys[i] = int.from_bytes(h.digest(), "little")
    return keys


def allocate(sizes: np.ndarray, keep_total: int, min_keep: int, power: float = 1.0) -> np.ndarray:
    """Records to keep per group: proportional to size, at least min(size, min_keep), summing to keep_total
    (largest remainder) whenever the minimums allow. With ``power`` p != 1 the kept count is proportional to
    size**p instead (capped at the size, water-filled)."""
    sizes = sizes.astype(np.int64)
    floor = np.minimum(sizes, min_keep)
    if keep_total <= floor.sum() or (sizes - floor).sum() == 0:
        return floor
    if power != 1.0:
        return _allocate_power(sizes, floor, keep_total, power)
    spare = keep_total - floor.sum()
    room = sizes - floor
    share = spare * room / room.sum()
    base = np.minimum(np.floor(share).astype(np.int64), room)
    return floor + _add_largest_remainders(base, spare - base.sum(), share - base, room)


def _allocate_power(sizes: np.ndarray, floor: np.ndarray, keep_total: int, power: float) -> np.ndarray:
    keep_total = min(int(keep_total), int(sizes.sum()))
    w = sizes.astype(np.float64) ** power
    lo, hi = 0.0, float(sizes.max() / w[sizes > 0].min()) + 1.0  # at hi every group is capped at its size
    for _ in range(100):
        c = (lo + hi) / 2
        if np.clip(c * w, floor, sizes).sum() < keep_total:
            lo = c
        else:
            hi = c
    t = np.clip(hi * w, floor, sizes)
    base = np.floor(t).astype(np.int64)
    return _add_largest_remainders(base, keep_total - int(base.sum()), t - base, sizes)


def _add_largest_remainders(base: np.ndarray, left: int, frac: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Hand the ``left`` units still missing one each to the groups with the largest fractional share (ties: the
    lower index), skipping groups already at their cap."""
    for i in np.lexsort((np.arange(len(base)), -frac)):
        if left <= 0:
            break
        if base[i] < cap[i]:
            base[i] += 1
            left -= 1
    return base


NEAREST_CANDIDATES = 16  # points per centre ordered up front for the nearest-unpicked resolution


def _nearest_first(dist: np.ndarray, m: int) -> list[np.ndarray]:
    """Per column j of ``dist`` (points x centres), the m nearest points in the order of a stable argsort of the
    column (by distance, then index), or the whole column's order where a tie at the m-th distance makes the m
    nearest ambiguous. Same result as ``np.argsort(dist, axis=0, kind="stable")`` cut at m rows, without sorting
    every column in full (that sort was a third of cluster pruning's time)."""
    n, k = dist.shape
    if m >= n:
        return list(np.argsort(dist, axis=0, kind="stable").T)
    part = np.argpartition(dist, m - 1, axis=0)[:m].T  # (k, m), unordered
    pd = np.take_along_axis(dist.T, part, 1)
    o = np.lexsort((part, pd), axis=1)
    top = np.take_along_axis(part, o, 1)
    edge = pd.max(1)
    tied = (dist <= edge[None, :]).sum(0) > m  # another point at the m-th distance: not decidable from m
    out = list(top)
    for j in np.flatnonzero(tied):
        out[j] = np.argsort(dist[:, j], kind="stable")
    return out


KMEANS_GRID = 1024.0  # k-means coordinates (standardised units) are whole multiples of 1/1024 ...
KMEANS_CLIP = 64.0  # ... within +-64 standard deviations


def _on_grid(x: np.ndarray) -> np.ndarray:
    """``x`` in whole units of 1/KMEANS_GRID (float64 holding integers of at most 2^16 in magnitude)."""
    return np.round(np.clip(x, -KMEANS_CLIP, KMEANS_CLIP) * KMEANS_GRID)


def _greedy_seeds(x: np.ndarray, xx: np.ndarray, k: int, rng: np.random.Generator, choose) -> np.ndarray:
    """k point indices picked one at a time over grid points ``x`` (``xx``: their squared norms): a random first
    point, then ``choose(d2)`` on every point's squared distance to its nearest pick so far. k-means++ seeding draws
    in proportion to ``d2``; farthest-first (``_kcenter_pick``) takes its argmax."""
    n = len(x)
    picked = np.empty(k, np.int64)
    picked[0] = rng.integers(n)
    d2 = np.full(n, np.inf)
    for j in range(k):
        if j:
            picked[j] = choose(d2)
        c = x[picked[j]]
        d2 = np.minimum(d2, np.maximum(xx - 2 * (x @ c) + xx[picked[j]], 0.0))
        # a picked point is never picked again: once every point left lies on a pick (a pool of repeated
        # coordinates), farthest-first's argmax of zeros took the first index again and again, and cluster kept
        # fewer records than allocated without a word (the prune audit: 25 distinct picks where 87-172 were asked)
        d2[picked[j]] = -1.0
    return picked


def _kmeans_pick(x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 8) -> np.ndarray:
    """Indices of the k points nearest k-means centres (k-means++ init, Lloyd iterations).

    Vectorised: squared distances as |x|^2 - 2 x.c + |c|^2 (one matrix product), centre updates as an
    assignment-matrix product, nearest-unpicked resolution over one argsort of the distance matrix.

    Exact on every CPU: points and centres lie on a grid of 1/KMEANS_GRID (``_on_grid``; centres are rounded back
    onto it), so every product and sum is an integer below 2^53 (|coordinate| <= 2^16, fewer than 2^21 features)
    and float64 holds it exactly whatever order the BLAS kernel adds in. With raw coordinates the matrix products
    differ in their last bits between OpenBLAS's kernels for different CPUs (AVX-512 against AVX2), which moved
    near-ties and so which records a pruning run kept: reports/pca.md regenerated on another machine no longer
    matched."""
    n = len(x)
    if k >= n:
        return np.arange(n)
    if x.shape[1] >= 1 << 21:
        raise ValueError(f"k-means over {x.shape[1]} features: products would leave float64's exact integers")
    x = _on_grid(x)
    xx = (x * x).sum(1)
    # k-means++: each next centre drawn with probability proportional to its squared distance to the nearest one
    c = x[_greedy_seeds(x, xx, k, rng, lambda d2: rng.choice(n, p=np.maximum(d2, 0) / np.maximum(d2, 0).sum())
                        if np.maximum(d2, 0).sum() > 0 else rng.choice(n))]
    rows = np.arange(n)
    for _ in range(iters):
        a = (xx[:, None] - 2 * (x @ c.T) + (c * c).sum(1)[None]).argmin(1)
        cnt = np.bincount(a, minlength=k)
        onehot = np.zeros((k, n), x.dtype)
        onehot[a, rows] = 1.0
        nz = cnt > 0
        c[nz] = np.round((onehot @ x)[nz] / cnt[nz, None])
    dist = xx[:, None] - 2 * (x @ c.T) + (c * c).sum(1)[None]
    picked = np.empty(k, np.int64)
    taken = np.zeros(n, bool)
    near = _nearest_first(dist, NEAREST_CANDIDATES)
    for j in range(k):  # nearest unpicked point to each centre, centres in order
        col = near[j]
        free = ~taken[col]
        if not free.any():  # every candidate taken (rare): the whole column, in the same order
            col = np.argsort(dist[:, j], kind="stable")
            free = ~taken[col]
        i = col[np.argmax(free)]
        taken[i] = True
        picked[j] = i
    return np.sort(picked)


def _kcenter_pick(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of k points chosen farthest-first (greedy k-center, Gonzalez 1985): a random first point, then each
    time the point farthest from every point chosen so far. What it leaves out are the points nearest a kept one, the
    most redundant first; exact on every CPU for the reason ``_kmeans_pick`` is (the same grid)."""
    n = len(x)
    if k >= n:
        return np.arange(n)
    x = _on_grid(x)
    return np.sort(_greedy_seeds(x, (x * x).sum(1), k, rng, lambda d2: int(np.argmax(d2))))


def cluster_coordinates(idx: np.ndarray, flat: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The coordinates ``cluster`` and ``hybrid`` pick representatives in: the pool's flat features standardised over
    the pool, plus its standardised label weighted ``CLUSTER_LABEL_WEIGHT``."""
    x = flat[idx].astype(np.float64)
    sd = x.std(0)
    x = (x - x.mean(0)) / np.where(sd > 0, sd, 1)
    lab = labels[idx].astype(np.float64)
    lsd = lab.std()
    lab = (lab - lab.mean()) / (lsd if lsd > 0 else 1)
    return np.concatenate([x, CLUSTER_LABEL_WEIGHT * lab[:, None]], axis=1)


def _cluster_select(idx: np.ndarray, k: int, flat: np.ndarray, labels: np.ndarray, rng) -> np.ndarray:
    """k representatives over the standardised flat features plus the standardised label weighted
    ``CLUSTER_LABEL_WEIGHT``, spread over the schedule space and the label range together (see the module docstring
    for why the label is a coordinate rather than a stratum): the records nearest the centres of a k-means, or, where
    at least ``KCENTER_FROM`` of the pool stays, the farthest-first picks of ``_kcenter_pick``."""
    if k >= len(idx):
        return idx
    x = cluster_coordinates(idx, flat, labels)
    pick = _kcenter_pick if k >= KCENTER_FROM * len(idx) else _kmeans_pick
    if len(idx) <= CLUSTER_BLOCK:
        return idx[np.sort(pick(x, k, rng))]
    # a big task: random blocks of at most CLUSTER_BLOCK records, k shared in proportion; k-means costs pool x kept,
    # so one k-means over a 4,000-record task ran at a sixth of the records/s of a 500-record one
    blocks = np.array_split(rng.permutation(len(idx)), -(-len(idx) // CLUSTER_BLOCK))
    ks = allocate(np.array([len(b) for b in blocks]), k, 0)
    picks = [b[pick(x[b], int(kb), rng)] for b, kb in zip(blocks, ks) if kb]
    return idx[np.sort(np.concatenate(picks))]


LGB_MAX_QUERY = 10_000  # LightGBM's lambdarank refuses a query (here: a task's training fold) with more rows


def importance_scores(feats: dict, labels: np.ndarray, groups: np.ndarray, valid: np.ndarray, seed: int,
                      num_threads: int = 2) -> np.ndarray:
    """Out-of-fold rank error of a LightGBM lambdarank proxy: |rank of prediction - rank of label| / group size.

    Records are split in two folds inside each group; each fold is scored by the model trained on the other."""
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    n = len(labels)
    fold = rng.integers(0, 2, n)
    score = np.zeros(n)
    flat = feats["flat"]
    for f in (0, 1):
        tr = np.flatnonzero((fold != f) & valid)
        te = np.flatnonzero((fold == f) & valid)
        if len(tr) < 10 or len(te) == 0:
            continue
        order = np.argsort(groups[tr], kind="stable")
        tr = tr[order]
        tr, counts = cap_queries(tr, groups[tr], LGB_MAX_QUERY, rng)
        rel = np.clip(np.floor(labels[tr] * 30), 0, 30).astype(int)
        params = {"objective": "lambdarank", "learning_rate": 0.1, "num_leaves": 31, "seed": seed, "verbose": -1,
                  "num_threads": num_threads, "label_gain": list(range(31)), "deterministic": True,
                  "force_row_wise": True, "min_data_in_leaf": 20}
        m = lgb.train(params, lgb.Dataset(flat[tr], rel, group=counts), num_boost_round=60)
        pred = m.predict(flat[te])
        g = groups[te]
        pr = pl.DataFrame({"g": g, "p": pred, "y": labels[te]}).with_columns(
            pl.col("p").rank("average").over("g").alias("rp"), pl.col("y").rank("average").over("g").alias("ry"),
            pl.len().over("g").alias("n"))
        score[te] = ((pr["rp"] - pr["ry"]).abs() / pr["n"]).to_numpy()
    return score


def task_rng(seed: int, hardware: str, task_id: str) -> np.random.Generator:
    """The random stream of one (hardware, task): a function of the seed and the task alone, so a task's selection
    does not depend on which other tasks share its run, its processing unit or its worker."""
    h = hashlib.blake2b(f"{hardware}\0{task_id}".encode(), digest_size=8).digest()
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int.from_bytes(h[:4], "little"),
                                  int.from_bytes(h[4:], "little")])


def check_prune_args(ratio: float, method: str, seed: int = 0, min_keep: int = 8, workers: int = 1) -> None:
    """Refuse, before anything is read: an unknown method, a ratio outside [0, 1) or not a number, a seed that is
    not an integer, a negative ``min_keep`` (it was stored as given) and fewer than one worker."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not isinstance(ratio, numbers.Real) or isinstance(ratio, bool) or not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio {ratio!r}: the fraction removed, a number in [0, 1)")
    from .storage import check_int

    for name, v, least in (("seed", seed, None), ("min_keep", min_keep, 0), ("workers", workers, 1)):
        check_int(name, v, least)


def _unit_features(df: pl.DataFrame, groups: np.ndarray, need_keys: bool, need_flat: bool,
                   feats: dict | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Duplicate keys (``schedule_keys``, from the steps) and flat features, featurizing ``FEATURE_SLICE`` rows at a
    time (the token tensor of a whole unit would be the biggest thing in memory; only the flat features are kept)."""
    keys = schedule_keys(df["steps"], groups) if need_keys else None
    if feats is not None or not need_flat:
        return keys, (feats["flat"] if need_flat else None)
    flat = [featurize(df.slice(lo, FEATURE_SLICE))["flat"]
            for lo in range(0, max(df.height, 1), FEATURE_SLICE)]  # an empty unit: one empty slice
    return keys, np.concatenate(flat)


def prepare_unit(df: pl.DataFrame, method: str, seed: int = 0, feats: dict | None = None) -> dict:
    """Everything the selection needs from a set of whole tasks (``df`` labelled): per-row group, label, validity,
    best-record flag, the pool the budget is allocated over, duplicate keys, flat features, importance scores.

    The pool per method: all records (random, cluster, importance); duplicate-set representatives plus each
    group's best record (redundancy, hybrid)."""
    n = df.height
    groups = _group_index(df) if n else np.zeros(0, np.int64)
    gkeys = (df.select("hardware", "task_id").with_columns(pl.Series("g", groups)).unique("g").sort("g")
             .select("hardware", "task_id").rows())
    labels = df["label"].to_numpy()
    valid = df["is_valid"].to_numpy()
    lab_masked = np.where(valid, labels, -1.0)
    best = np.zeros(n, bool)
    order = np.lexsort((-lab_masked, groups))
    first = np.ones(n, bool)
    first[1:] = groups[order][1:] != groups[order][:-1]
    best[order[first & (lab_masked[order] > 0)]] = True
    need_keys = method in ("redundancy", "hybrid", "density")
    need_flat = method in ("cluster", "hybrid", "importance")
    keys, flat = _unit_features(df, groups, need_keys, need_flat, feats)
    unit = {"groups": groups, "labels": labels, "valid": valid, "best": best, "pool": np.ones(n, bool)}
    info = {}
    if need_keys:
        # representative of each duplicate set: its best (highest label) member, so labels keep their scale
        o = np.lexsort((np.arange(n), -lab_masked, keys))
        rep = np.ones(n, bool)
        rep[1:] = keys[o][1:] != keys[o][:-1]
        is_rep = np.zeros(n, bool)
        is_rep[o[rep]] = True
        unit["pool"] = is_rep | best
        unit["merge_keys"] = keys
        info["duplicates"] = int((~is_rep).sum())
    if method in ("hybrid", "density"):
        # failed records of the pool: these methods keep them last, only where a task has too few valid ones
        info["failed_in_pool"] = int((unit["pool"] & ~valid).sum())
    if flat is not None:
        unit["flat"] = flat
    if method == "importance" or (method == "hybrid" and HYBRID_IMPORTANCE_SHARE > 0):
        unit["imp"] = importance_scores({"flat": flat}, labels, groups, valid, seed)
    return {"arrays": unit, "group_keys": gkeys, "info": info}


def pool_counts(unit: dict) -> np.ndarray:
    a = unit["arrays"]
    return np.bincount(a["groups"][a["pool"]], minlength=len(unit["group_keys"]))


def select_unit(unit: dict, alloc: np.ndarray, method: str, seed: int) -> np.ndarray:
    """Keep mask over a unit's rows, given the records to keep per group (``alloc``, in group order). Each group
    draws from its own stream (``task_rng``), so the result for a task depends on its records, the seed and its
    allocation only."""
    a = unit["arrays"]
    groups, labels, valid, best, pool = a["groups"], a["labels"], a["valid"], a["best"], a["pool"]
    n = len(groups)
    keep = best & pool
    if n == 0:
        return keep
    by_group = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[by_group], prepend=-1, append=groups.max() + 1))
    for gi in range(len(bounds) - 1):
        idx = by_group[bounds[gi]:bounds[gi + 1]]
        g = int(groups[idx[0]])
        rng = task_rng(seed, *unit["group_keys"][g])
        k = int(alloc[g]) - int(keep[idx].sum())
        cand = idx[pool[idx] & ~keep[idx]]
        if k <= 0 or len(cand) == 0:
            continue
        if method in ("random", "redundancy"):
            keep[rng.permutation(cand)[:k]] = True
            continue
        if method in ("hybrid", "density"):
            cand_valid = cand[valid[cand]]
            if k > len(cand_valid):  # not enough valid ones: add failures
                keep[cand_valid] = True
                keep[rng.permutation(cand[~valid[cand]])[:k - len(cand_valid)]] = True
                continue
            cand = cand_valid
        if k >= len(cand):
            keep[cand] = True
        elif method == "cluster":
            keep[_cluster_select(cand, k, a["flat"], labels, rng)] = True
        elif method == "importance":
            keep[_importance_pick(cand, k, a["imp"], rng)] = True
        else:  # hybrid, density: the task's fastest programs, then cluster representatives (and importance picks)
            kt = int(round(k * HYBRID_TOP_SHARE))
            if kt:
                keep[cand[np.argsort(-labels[cand], kind="stable")[:kt]]] = True
                cand, k = cand[~keep[cand]], k - kt
                if k <= 0 or len(cand) == 0:
                    continue
            if method == "density":  # the rest at random: the kept set keeps the pool's density
                keep[rng.permutation(cand)[:k]] = True
                continue
            kc = k - int(round(k * HYBRID_IMPORTANCE_SHARE))
            sel = _cluster_select(cand, kc, a["flat"], labels, rng) if kc else np.array([], np.int64)
            keep[sel] = True
            if k - len(sel) > 0:
                rest = cand[~keep[cand]]
                keep[_importance_pick(rest, k - len(sel), a["imp"], rng)] = True
    return keep


def allocation_power(method: str) -> float:
    """The exponent of ``allocate`` for a method: ``hybrid`` its tuned ``HYBRID_ALLOCATION_POWER``, every other
    method (the random control above all) keeps records in proportion to the task's pool."""
    return HYBRID_ALLOCATION_POWER if method == "hybrid" else 1.0


def global_allocation(group_keys: list[tuple[str, str]], counts: np.ndarray, keep_total: int,
                      min_keep: int, power: float = 1.0) -> np.ndarray:
    """``allocate`` over all groups of a dataset taken in (hardware, task_id) order, whatever order (units,
    workers) they arrived in; returned in the order given."""
    order = sorted(range(len(group_keys)), key=lambda i: group_keys[i])
    alloc_sorted = allocate(np.asarray(counts, np.int64)[order], keep_total, min_keep, power)
    alloc = np.empty(len(order), np.int64)
    alloc[order] = alloc_sorted
    return alloc


def select(df: pl.DataFrame, ratio: float, method: str = "hybrid", seed: int = 0, min_keep: int = 8,
           feats: dict | None = None) -> tuple[np.ndarray, dict]:
    """Decide which rows of ``df`` (whole tasks, labelled) to keep. Returns (keep mask, info).

    In memory, on one frame; ``prune`` runs the same three steps (``prepare_unit``, ``global_allocation``,
    ``select_unit``) over units of a stored dataset, so both keep the same records (except ``importance``, whose
    proxy model is trained per unit)."""
    check_prune_args(ratio, method, seed, min_keep)
    unit = prepare_unit(df, method, seed, feats)
    keep_total = int(round(df.height * (1 - ratio)))
    alloc = global_allocation(unit["group_keys"], pool_counts(unit), keep_total, min_keep, allocation_power(method))
    keep = select_unit(unit, alloc, method, seed)
    return keep, {**unit["info"], "merge_keys": unit["arrays"].get("merge_keys")}


def _importance_pick(cand: np.ndarray, k: int, imp: np.ndarray, rng) -> np.ndarray:
    """The top 3/4 of k by out-of-fold rank error, the last 1/4 at random from the rest."""
    if k >= len(cand):
        return cand
    k_top = (3 * k) // 4
    o = cand[np.lexsort((cand, -imp[cand]))]
    top = o[:k_top]
    rest = o[k_top:]
    return np.concatenate([top, rng.permutation(rest)[: k - k_top]])


def merge_duplicates(df: pl.DataFrame, keep: np.ndarray, merge_keys: np.ndarray | None) -> pl.DataFrame:
    """Kept representatives absorb the costs of the duplicates they stand for; mean_cost is recomputed."""
    kept = df.filter(pl.Series(keep))
    if merge_keys is None:
        return kept
    allc = df.select(pl.Series("k", merge_keys), "costs", "is_valid").filter(pl.col("is_valid")).group_by(
        "k").agg(pl.col("costs").list.explode(keep_nulls=False, empty_as_null=False).alias("mcosts"), pl.len().alias("n_merged"))
    kk = pl.Series("k", merge_keys).filter(pl.Series(keep))
    kept = kept.with_columns(kk).join(allc, on="k", how="left", maintain_order="left")
    kept = kept.with_columns(
        pl.when(pl.col("is_valid") & (pl.col("n_merged") > 1)).then(pl.col("mcosts")).otherwise(pl.col("costs"))
        .alias("costs")
    ).with_columns(
        pl.when(pl.col("is_valid")).then(pl.col("costs").list.mean()).otherwise(None).alias("mean_cost")
    )
    return kept.drop("k", "mcosts", "n_merged")


def plan_units(dataset: Path, unit_records: int = UNIT_RECORDS) -> list[dict]:
    """Split a stored dataset into processing units of whole tasks.

    Shards that share a (hardware, task) are joined (union-find) into components, so every task lies in exactly
    one component; components, in order of their first (hardware, task_id), are packed into units of up to
    ``unit_records`` records (a bigger component is a unit of its own). TenSet keeps one file per task and convert
    packs whole files into a shard, so its components are single shards (a convert group, ~14k records) and a
    unit is one shard or a few. Reads the two key columns only."""
    import pyarrow.parquet as pq

    root = Path(dataset)
    shards = record_files(root)
    parent = list(range(len(shards)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[str, str], int] = {}
    rows, first, tasks = [], [], []
    for i, f in enumerate(shards):
        try:
            md = pq.ParquetFile(f).metadata
        except OSError as e:  # a footer damaged inside (its magic bytes whole): a thrift traceback
            from .storage import damaged_inside

            raise damaged_inside(f, f"its Parquet footer: {e}") from e
        rows.append(md.num_rows)
        ks = _single_task(md)
        if ks is None:
            t = pl.from_arrow(pq.read_table(f, columns=["hardware", "task_id"]))
            ks = t.unique().sort(["hardware", "task_id"]).rows()
        tasks.append(ks)
        first.append(ks[0] if ks else ("", ""))
        for k in ks:
            j = owner.setdefault(k, i)
            if j != i:
                parent[find(i)] = find(j)
    comps: dict[int, dict] = {}
    for i, f in enumerate(shards):
        c = comps.setdefault(find(i), {"shards": [], "records": 0, "first": first[i], "tasks": set()})
        c["shards"].append(f.relative_to(root).as_posix())
        c["records"] += rows[i]
        c["first"] = min(c["first"], first[i])
        c["tasks"].update(tasks[i])
    units: list[dict] = []
    for c in sorted(comps.values(), key=lambda c: (c["first"], c["shards"])):
        if units and units[-1]["records"] + c["records"] <= unit_records:
            units[-1]["shards"] += c["shards"]
            units[-1]["records"] += c["records"]
            units[-1]["tasks"] |= c["tasks"]
        else:
            units.append({"shards": list(c["shards"]), "records": c["records"], "tasks": set(c["tasks"])})
    for i, u in enumerate(units):
        u["id"] = i
        u["tasks"] = sorted(u["tasks"])  # the unit's (hardware, task_id)s
    return units


def _stage_split_by_unit(dataset: Path, split: str, units: list[dict], stage: Path) -> int:
    """The record ids of the split's training part, one file per unit (``stage/split/<id>.parquet``), read from the
    split in one pass (each unit scanning the whole split file cost units x split records). Holds the training
    part's rows (record id, hardware, task, unit) in memory once, and a sorted copy: 50-75 bytes a row each.
    Returns how many training rows the split has."""
    from .storage import write_parquet_atomic

    owner = pl.DataFrame([(h, t, u["id"]) for u in units for h, t in u["tasks"]],
                         schema={"hardware": pl.Utf8, "task_id": pl.Utf8, "unit": pl.Int64}, orient="row")
    train = (pl.scan_parquet(dataset / "splits" / f"{split}.parquet").filter(pl.col("part") == "train")
             .select("hardware", "task_id", "record_id").join(owner.lazy(), on=["hardware", "task_id"], how="left")
             .collect())
    rows = train.height
    train = train.filter(pl.col("unit").is_not_null()).sort("unit", "record_id")
    (stage / "split").mkdir(parents=True, exist_ok=True)
    u = train["unit"].to_numpy()
    bounds = np.flatnonzero(np.diff(u, prepend=-1, append=-2))
    for a, b in zip(bounds[:-1], bounds[1:]):
        write_parquet_atomic(stage / "split" / f"{int(u[a]):05d}.parquet", train.slice(a, b - a).select(
            SPLIT_KEYS).to_arrow())
    return rows


LIGHT_COLUMNS = ["hardware", "task_id", "record_id", "is_valid", "mean_cost", "costs"]  # what random's pass 1 reads


def _single_task(md) -> list[tuple[str, str]] | None:
    """[(hardware, task_id)] when the footer's statistics prove the shard holds one task (min = max in every row
    group: TenSet's one file per task), else None (the columns must be read)."""
    names = [md.schema.column(j).path for j in range(md.num_columns)]
    try:
        cols = [names.index("hardware"), names.index("task_id")]
    except ValueError:
        return None
    seen = set()
    for g in range(md.num_row_groups):
        key = []
        for j in cols:
            st = md.row_group(g).column(j).statistics
            if st is None or not st.has_min_max or st.min != st.max or st.null_count:
                return None
            key.append(st.min.decode() if isinstance(st.min, bytes) else st.min)
        seen.add(tuple(key))
    return sorted(seen) if len(seen) == 1 else ([] if md.num_rows == 0 else None)


def _read_unit(dataset: str, shards: list[str], columns: list[str] | None = None) -> pl.DataFrame:
    df = pl.concat([pl.read_parquet(Path(dataset) / rel, columns=columns) for rel in shards], how="vertical")
    return with_labels(df.sort(["hardware", "task_id", "record_id"]))


def _split_training_rows(item: dict, df: pl.DataFrame) -> tuple[np.ndarray | None, int]:
    """Which rows of a unit's ``df`` are in the training part of the split the prune was given (None: no split,
    every row is pruned), from the unit's file of ``_stage_split_by_unit``, and how many of those staged training
    rows name one of ``df``'s records (id, hardware and task). A prune with a split selects among these rows alone;
    the split's validation and test records, and records the split leaves out, are kept as they are."""
    if item.get("split") is None:
        return None, 0
    f = Path(item["stage"]) / "split" / f"{item['id']:05d}.parquet"
    if not f.exists():
        return np.zeros(df.height, bool), 0
    ids = pl.read_parquet(f).unique()
    keys = df.select(SPLIT_KEYS)
    matched = ids.join(keys.unique(), on=SPLIT_KEYS, how="semi").height
    tr = keys.join(ids.with_columns(pl.lit(True).alias("_train")), on=SPLIT_KEYS, how="left", maintain_order="left")
    return tr["_train"].fill_null(False).to_numpy(), matched


SPLIT_MASK = "_split_train"  # a unit's npz: which of its rows are in the split's training part


def _pass1(item: dict) -> dict:
    """Prepare one unit: selection arrays go to ``stage/units/<id>.npz``; the pool counts come back."""
    df = _read_unit(item["dataset"], item["shards"], LIGHT_COLUMNS if item["method"] == "random" else None)
    tr, matched = _split_training_rows(item, df)
    whole = 0 if tr is None else int((~tr).sum())
    if tr is not None:
        df = df.filter(pl.Series(tr))
    unit = prepare_unit(df, item["method"], item["seed"])
    # the unit's training-part mask travels with its arrays (pass 2 reads the same rows in the same order)
    np.savez(Path(item["stage"]) / "units" / f"{item['id']:05d}.npz", **unit["arrays"],
             **({SPLIT_MASK: tr} if tr is not None else {}))
    return {"id": item["id"], "group_keys": unit["group_keys"], "counts": pool_counts(unit).tolist(),
            "records": df.height, "kept_whole": whole, "split_matched": matched, "info": unit["info"]}


LABEL_BINS = 10_000  # label histogram of the report: quantiles to 1e-4


def _pass2(item: dict) -> dict:
    """Select, merge duplicates and write one unit's kept records; return what the report needs."""
    from .convert import _safe_part
    from .features import dataset_operator_classes
    from .storage import write_parquet_atomic

    df = _read_unit(item["dataset"], item["shards"])
    npz = Path(item["stage"]) / "units" / f"{item['id']:05d}.npz"
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    tr = arrays.pop(SPLIT_MASK, None)
    unit = {"arrays": arrays, "group_keys": [tuple(k) for k in item["group_keys"]]}
    pool = df if tr is None else df.filter(pl.Series(tr))
    keep = select_unit(unit, np.asarray(item["alloc"], np.int64), item["method"], item["seed"])
    # with a split, a duplicate set keeps its fastest member's own costs (no pooling): the task's best valid cost,
    # the label scale of its held-out records, cannot move (pooled re-measurements of the best record moved the
    # test labels of its task by up to 7%: the split audit)
    kept = merge_duplicates(pool, keep, None if tr is not None else arrays.get("merge_keys"))
    kept_pool = kept.height
    if tr is not None:  # the split's other records stay as they are (duplicates merge within the training part only)
        kept = pl.concat([kept, df.filter(~pl.Series(tr))], how="vertical_relaxed")
    kept = kept.sort(["hardware", "task_id", "record_id"])
    # one shard per hardware folder, as convert writes them: two names of one folder (gpu/a100 and gpu_a100) share
    # it (the column keeps the name); one shard per name wrote both to one path and failed
    folders: dict[str, list[pl.DataFrame]] = {}
    for (hw,), part in kept.group_by("hardware", maintain_order=True):
        folders.setdefault(_safe_part(hw), []).append(part)
    outputs = []
    for folder, parts in folders.items():
        rel = f"records/hardware={folder}/part-{item['id']:05d}.parquet"
        write_parquet_atomic(Path(item["stage"]) / rel, pl.concat(parts).select(RECORD_SCHEMA.names).to_arrow()
                             .cast(RECORD_SCHEMA))
        outputs.append(rel)
    npz.unlink()
    ops = dataset_operator_classes(df, item["dataset"])
    before = df.group_by("hardware", "task_id").len().rename({"len": "before"})
    after = kept.group_by("hardware", "task_id").len().rename({"len": "after"})
    tasks = before.join(after, on=["hardware", "task_id"], how="left").fill_null(0).join(ops.select(
        "task_id", "op_class"), on="task_id", how="left")
    edges = np.linspace(0.0, 1.0, LABEL_BINS + 1)
    hist = lambda d: np.histogram(d.filter(pl.col("is_valid"))["label"].to_numpy(), edges)[0].tolist()  # noqa
    return {"id": item["id"], "outputs": outputs, "after": kept_pool, "tasks": tasks.to_dicts(),
            "hist_before": hist(df), "hist_after": hist(with_labels(kept)), **best_cost_moves(df, kept)}


def best_cost_moves(before: pl.DataFrame, after: pl.DataFrame) -> dict:
    """Tasks whose best valid mean cost (their label scale) the pruning moved, and the largest relative move. Every
    task keeps its best program, but merging the re-measurements of an identical schedule into the kept record
    pools their costs, so the best program's mean moves, and another program can become the best (the prune audit:
    bennu-a100-resnet34, a program measured twice at 2.25 and 2.55 us; roller-k80 at hybrid 0.45, 4 of 117 tasks by
    under 0.1%)."""
    best = lambda d: (d.filter(pl.col("is_valid")).group_by("hardware", "task_id")  # noqa: E731
                      .agg(pl.col("costs").list.mean().min().alias("b")))
    j = best(before).join(best(after), on=["hardware", "task_id"], suffix="_after")
    rel = ((j["b_after"] - j["b"]).abs() / j["b"]).to_numpy()
    moved = rel > 1e-9
    return {"best_cost_moved_tasks": int(moved.sum()), "best_cost_moved_max": float(rel.max()) if moved.any() else 0.0}


def _check_out(dataset: Path, out: Path) -> None:
    """Refuse an output folder that is the source dataset or lies inside it (or holds it): writing the pruned
    dataset there replaced the source's records with the kept ones, without a word."""
    src, dst = dataset.resolve(), out.resolve()
    if src == dst or src in dst.parents or dst in src.parents:
        raise ValueError(f"--out {out}: the pruned dataset needs its own folder, apart from the source dataset "
                         f"{dataset} (it would {'replace' if src == dst else 'nest with'} the source)")
    # another dataset there would lose its records to the kept ones (a converted dataset of 29,840 records was left
    # with 1,650, without a word): only an earlier prune's output is replaced
    m = out / "manifest.json"
    if m.is_file():
        try:
            pruned = "pruned_from" in orjson.loads(m.read_bytes())
        except (orjson.JSONDecodeError, OSError):
            pruned = False
        if not pruned:
            raise ValueError(f"--out {out}: it holds a dataset that curate prune did not write (its manifest.json "
                             "has no pruned_from); give an empty or new folder, or an earlier prune's output")
    elif (out / "records").is_dir():
        raise ValueError(f"--out {out}: it holds records/ but no manifest.json; give an empty or new folder")
    from .storage import check_out_kind

    check_out_kind(out, "dataset")


@names_damaged_shard()
def prune(dataset: Path, out: Path, ratio: float, method: str = "hybrid", seed: int = 0, min_keep: int = 8,
          report: bool = True, executor: str = "local", workers: int = 1, address: str | None = None,
          unit_records: int = UNIT_RECORDS, split: str | None = None) -> dict:
    """Prune ``dataset`` into a new dataset at ``out`` (same schema, own manifest, catalog and report).

    Streams: the dataset is cut into units of whole tasks (``plan_units``); pass 1 prepares each unit (features,
    duplicate keys, pool counts), the kept budget is allocated across all tasks from the counts alone
    (``global_allocation``), pass 2 selects and writes each unit's kept records as one shard per hardware. Memory is
    bounded by the largest unit, not the dataset, and the units run on any executor (``executors.map_unordered``:
    local processes or Ray) with byte-identical output, since every task draws from its own random stream.

    ``split``: prune only the training part of the dataset's split of that name (``ratio`` is then the fraction of
    that part removed); its validation and test records, and records it leaves out, are kept as they are, and the
    pruned dataset gets the split restricted to its records. A model trained there is then scored on exactly the
    test records of the source's split (``curate evaluate MODEL PRUNED --split NAME``), as one trained on the
    source: the comparison ``--evaluate`` makes, with the product's own commands. Duplicates merge without pooling
    their costs (each set keeps its fastest member as it was), so no task's best valid cost moves and every
    held-out label stays as it was. Split rows match records by id, hardware and task. A split made on the pruned
    dataset itself draws its test records from the kept ones. What does change for held-out records: the
    within-task statistics of the task-relative features (``model.task_relative_inputs``) are over every record of
    the task in the dataset scored, so the pruned dataset's fewer training records give its test records other
    feature values than the source's: part of what training on pruned data means, as each model is scored on the
    dataset it trained on."""
    from .executors import map_unordered, process_pool, resolve_executor
    from .storage import _explain, atomic_write_json, atomic_write_text, dataset_lock, remove_stale_tmp

    check_prune_args(ratio, method, seed, min_keep, workers)
    # NumPy numbers pass the checks; as Python's they go into the JSON records (np.float64 failed there, after the work)
    ratio, seed, min_keep, workers = float(ratio), int(seed), int(min_keep), int(workers)
    executor = resolve_executor(executor, address)
    t0 = time.perf_counter()
    dataset, out = Path(dataset), Path(out)
    _check_out(dataset, out)
    source = None
    if split is not None:
        from .splits import check_split_name, split_file, split_info
        from .storage import file_sha256

        check_split_name(None, split)
        source = {"sha256": file_sha256(split_file(dataset, split)), "info": split_info(dataset, split)}
        counts = source["info"].get("counts") or {}
        if counts and not counts.get("train"):  # else "was the split made on another dataset?", after pass 1
            raise ValueError(f"split {split} of {dataset} has no training part to prune (its parts: "
                             + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) + ")")
    units = plan_units(dataset, unit_records)
    workers = max(1, min(int(workers), len(units)))  # no pool for a single unit
    with dataset_lock(out, what="curate prune"):
        remove_stale_tmp(out)
        # All or nothing: every new file (shards, prune.json, the report, the manifest, the catalog) is written into
        # a staging folder first; only when all of them exist are they renamed into place (renames need no space),
        # so a full disk or a kill before that leaves the earlier result exactly as it was, and a kill during the
        # renames leaves a dataset marked incomplete (below).
        stage = out / f".stage.tmp-{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        try:
            (stage / "units").mkdir(parents=True)
            split_rows = _stage_split_by_unit(dataset, split, units, stage) if split is not None else 0
            common = {"dataset": str(dataset), "stage": str(stage), "method": method, "seed": seed, "split": split}
            items = [{**common, **u} for u in units]
            cost = lambda it: it["records"]  # noqa: E731
            with process_pool(executor, workers) as pool:  # one set of workers for both passes
                first = sorted(map_unordered(_pass1, items, executor, workers, address, cost, pool),
                               key=lambda r: r["id"])
                keys = [tuple(k) for r in first for k in r["group_keys"]]
                n = sum(r["records"] for r in first)
                if split is not None and n == 0:
                    raise ValueError(f"{dataset / 'splits' / (split + '.parquet')}: no record of the split's training "
                                     f"part is a record of {dataset} (same record id, hardware and task): was the "
                                     "split made on another dataset? Make it on this one with `curate splits make`")
                alloc = global_allocation(keys, np.concatenate([np.asarray(r["counts"], np.int64) for r in first])
                                          if first else np.zeros(0, np.int64), int(round(n * (1 - ratio))),
                                          min_keep, allocation_power(method))
                at = 0
                for it, r in zip(items, first):
                    it["group_keys"], it["alloc"] = r["group_keys"], alloc[at:at + len(r["group_keys"])].tolist()
                    at += len(r["group_keys"])
                    # k-means over a task's pool costs about pool x kept (pool capped at the cluster block): a unit of
                    # big tasks is slower than its record count says; submitting the costliest first keeps every
                    # worker busy to the end
                    c = np.minimum(np.asarray(r["counts"], np.float64), CLUSTER_BLOCK)
                    it["work"] = float((c * np.asarray(it["alloc"], np.float64)).sum()) + it["records"]
                second = sorted(map_unordered(_pass2, items, executor, workers, address, lambda it: it["work"], pool),
                                key=lambda r: r["id"])
            outputs = [rel for r in second for rel in r["outputs"]]
            kept_n = sum(r["after"] for r in second)
            achieved = 1 - kept_n / n if n else 0.0
            whole = sum(r["kept_whole"] for r in first)  # with a split: its records outside the training part
            info: dict = {}
            for r in first:
                for k, v in r["info"].items():
                    info[k] = info.get(k, 0) + v
            info["best_cost_moved_tasks"] = sum(r["best_cost_moved_tasks"] for r in second)
            info["best_cost_moved_max"] = round(max([r["best_cost_moved_max"] for r in second], default=0.0), 6)
            tasks = pl.DataFrame([t for r in second for t in r["tasks"]],
                                 schema={"hardware": pl.Utf8, "task_id": pl.Utf8, "before": pl.Int64,
                                         "after": pl.Int64, "op_class": pl.Utf8}).sort("hardware", "task_id")
            summary = {
                "source": str(dataset), "method": method, "ratio_requested": ratio,
                "ratio_achieved": round(achieved, 6), "seed": seed, "min_keep": min_keep,
                "records_before": n + whole, "records_after": kept_n + whole, "units": len(units),
                "seconds": round(time.perf_counter() - t0, 3), **info, "outputs": outputs,
            }
            if split is not None:
                summary["split"] = {"name": split, "train_before": n, "train_after": kept_n, "kept_whole": whole}
                unmatched = split_rows - sum(r["split_matched"] for r in first)
                if unmatched:  # a stale split: its training part names records this dataset no longer has
                    summary["split"]["unmatched_train_rows"] = unmatched
                    summary["split_warning"] = (
                        f"{unmatched} of the {split_rows} training rows of split {split} name no record of this "
                        "dataset (it was converted again since the split was made?); make the split again")
            summary["per_hardware"] = tasks.group_by("hardware").agg(pl.col("before").sum(), pl.col(
                "after").sum()).sort("hardware").to_dicts()
            warning = ratio_warning(ratio, achieved, min_keep, info.get("duplicates", 0), n, pooled=split is None)
            if warning:  # in prune.json and the report too (it was said on stderr only, and always blamed min_keep)
                summary["warning"] = warning
            files = list(outputs)
            atomic_write_json(stage / "prune.json", summary)
            files.append("prune.json")
            if report:
                hist = {k: np.sum([r[k] for r in second], axis=0) if second else np.zeros(LABEL_BINS, np.int64)
                        for k in ("hist_before", "hist_after")}
                atomic_write_text(stage / "prune_report.md", prune_report(tasks, hist, summary))
                files.append("prune_report.md")
            # the tables that describe tasks rather than records (MetaSchedule workloads, network membership) carry
            # over whole: a pruned dataset answers the same splits (network-wise included) as its source
            for sub in SIDE_TABLES:
                for f in sorted((dataset / sub).glob("*.parquet")):
                    (stage / sub).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, stage / sub / f.name)
                    files.append(f"{sub}/{f.name}")
            if split is not None:
                files += _restricted_split(dataset, split, stage, outputs, summary, source)
            atomic_write_json(stage / "manifest.json", {"pruned_from": str(dataset), "prune": {
                k: summary[k] for k in ("method", "ratio_requested", "ratio_achieved", "seed", "min_keep", "split")
                if k in summary}, "inputs": {}})
            files.append("manifest.json")
            try:
                from .catalog import CATALOG_NAME, build_catalog
            except ImportError:
                CATALOG_NAME = None
            # the splits and tables made on an earlier prune of ``out`` stay only when this one keeps the same
            # records: a split of other records had rows of none of them, and training joined it without a word
            # (the prune audit: 229 of a split's 861 rows matched a re-prune at another ratio)
            carry = _record_ids_digest(out, None) == _record_ids_digest(stage, outputs) is not None
            if CATALOG_NAME:
                # the catalog's views depend on which tables exist: link the dataset's other tables in (no copy)
                for sub in ("splits", "tables") if carry else ():
                    for f in sorted((out / sub).rglob("*")) if (out / sub).is_dir() else []:
                        if f.is_file() and ".tmp-" not in f.name:
                            dst = stage / f.relative_to(out)
                            if dst.exists() or (split is not None and sub == "splits" and
                                                _same_view(_split_stem(out / sub / f.relative_to(out / sub).parts[0]),
                                                           split)):
                                continue  # this prune's own split replaces it (and any other that has its SQL view)
                            dst.parent.mkdir(parents=True, exist_ok=True)
                            os.link(f, dst)
                build_catalog(stage)  # views hold relative paths: the file is valid once moved into out
                files.append(CATALOG_NAME)
            # commit: while the files are put in place one by one, the manifest says the prune is incomplete; it is
            # replaced last, once the files of an earlier prune that this one does not make are gone. A kill in
            # between leaves a dataset readers refuse (storage.named_shards), never one that mixes two prunings
            atomic_write_json(out / "manifest.json", {"pruned_from": str(dataset), "incomplete": True, "inputs": {}})
            if not carry:
                for sub in ("splits", "tables"):
                    shutil.rmtree(out / sub, ignore_errors=True)
            elif split is not None and CATALOG_NAME:  # a carried split with this split's SQL view goes (above)
                for f in sorted((out / "splits").iterdir()) if (out / "splits").is_dir() else []:
                    if _same_view(_split_stem(f), split):
                        shutil.rmtree(f) if f.is_dir() else f.unlink()
            for rel in files:
                if rel != "manifest.json":
                    (out / rel).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(stage / rel, out / rel)
            for p in [*(out / "records").glob("*/*.parquet"), *(q for sub in SIDE_TABLES
                                                               for q in (out / sub).glob("*.parquet"))]:
                if p.relative_to(out).as_posix() not in files:
                    p.unlink()
            os.replace(stage / "manifest.json", out / "manifest.json")
        except OSError as e:
            raise _explain(e, out) from e
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return summary


def _restricted_split(dataset: Path, split: str, stage: Path, outputs: list[str], summary: dict,
                      source: dict) -> list[str]:
    """The source's split ``split`` restricted to the kept records (rows matched by id, hardware and task), staged
    as ``splits.store_split`` stores a split, its record saying how it was pruned. ``source``: the split's record
    and sha256 as the prune read them at its start; a split made again since is refused."""
    from .splits import store_split
    from .storage import file_sha256

    src = dataset / "splits" / f"{split}.parquet"
    if file_sha256(src) != source["sha256"]:
        raise ValueError(f"{src} was made again while the prune ran; run the prune again")
    sp = pl.read_parquet(src)
    if outputs:
        ids = pl.scan_parquet([str(stage / rel) for rel in outputs]).select(SPLIT_KEYS).unique().collect()
        sp = sp.join(ids, on=SPLIT_KEYS, how="semi", maintain_order="left")
    else:
        sp = sp.head(0)
    info = dict(source["info"])
    info["counts"] = dict(sorted(sp.group_by("part").len().iter_rows()))
    info["pruned"] = {"from": str(dataset.resolve()), "split_sha256": source["sha256"], "method": summary["method"],
                      "ratio": summary["ratio_requested"], "seed": summary["seed"], "part": "train"}
    (stage / "splits").mkdir(parents=True, exist_ok=True)
    return store_split(stage, split, sp, info)


def _same_view(stem: str, split: str) -> bool:
    """Whether a split named ``stem`` other than ``split`` would have ``split``'s SQL view (``split_<name>``)."""
    from .catalog import sanitize_name

    return stem != split and sanitize_name(stem) == sanitize_name(split)


def _split_stem(f: Path) -> str:
    """The split a file or folder under splits/ belongs to (``<name>.parquet``, ``<name>.json``, ``<name>/``;
    names may hold dots)."""
    return f.stem if f.is_file() else f.name


def ratio_warning(ratio: float, achieved: float, min_keep: int, duplicates: int, n: int,
                  pooled: bool = True) -> str | None:
    """What a pruning whose achieved ratio misses the request by more than 1% says, naming the cause: more removed
    (identical schedules merged into one record remove at least that many, at ratio 0 too) or fewer (every task
    keeps its best record and at least ``min_keep``)."""
    if abs(achieved - ratio) <= 0.01:
        return None
    head = f"achieved ratio {achieved:.4f} differs from the requested {ratio} by more than 1%: "
    if achieved > ratio:
        return head + (f"{duplicates} of the {n} records were identical schedules of another record, merged into it "
                       f"({'their costs kept' if pooled else 'keeping its own costs'}), so at least that many go "
                       "whatever the ratio")
    return head + (f"every task keeps its best valid record and at least min_keep={min_keep} records, which keeps "
                   "more than the ratio leaves")


def _record_ids_digest(root: Path, outputs: list[str] | None) -> str | None:
    """sha256 of the sorted record ids of the record shards ``outputs`` under ``root`` (None: those its manifest
    names); None where there are none (no earlier prune)."""
    import pyarrow.parquet as pq

    if outputs is None:
        try:
            from .storage import named_shards

            names = named_shards(root)
        except (OSError, ValueError):
            return None
        if not names:
            return None
        outputs = sorted(names)
    files = [root / rel for rel in outputs if rel.startswith("records/")]
    if not files or not all(f.is_file() for f in files):
        return None
    ids = np.sort(np.concatenate([pq.read_table(f, columns=["record_id"]).column(0).to_numpy(zero_copy_only=False)
                                  for f in files]).astype(str))
    return hashlib.sha256("\n".join(ids.tolist()).encode()).hexdigest()


def _hist_quantile(hist: np.ndarray, q: float) -> float:
    """Quantile of a LABEL_BINS histogram over [0, 1]: the centre of the bin holding it."""
    c = np.cumsum(hist)
    if c[-1] == 0:
        return float("nan")
    # the bin of the ceil(q * n)-th value (at least the first: q = 0 is the minimum's bin, where searching for 0
    # found bin 0 whatever the labels)
    i = int(np.searchsorted(c, max(q * c[-1], 1), side="left"))
    return (min(i, len(hist) - 1) + 0.5) / len(hist)


def prune_report(tasks: pl.DataFrame, hist: dict, summary: dict) -> str:
    """Markdown report from per-task counts (hardware, task_id, op_class, before, after) and label histograms."""
    lines = [f"# Pruning report: {summary['method']}, ratio {summary['ratio_requested']}", "",
             f"- records: {summary['records_before']} -> {summary['records_after']} "
             f"(removed {summary['ratio_achieved']:.2%}{' of the training part' if summary.get('split') else ''}); "
             f"seed {summary['seed']}; {summary['seconds']} s; "
             f"{summary['units']} unit(s) of whole tasks"] + ([
        f"- split {summary['split']['name']}: its training part pruned, {summary['split']['train_before']} -> "
        f"{summary['split']['train_after']} records (the ratio is of this part); its other "
        f"{summary['split']['kept_whole']} records (validation, test, left out) kept as they are"]
        if summary.get("split") else []) + [f"- warning: {summary[k]}" for k in ("split_warning", "warning")
                                            if summary.get(k)] + (
        [f"- {summary['best_cost_moved_tasks']} task(s) have another best mean cost (label scale) than before, by up "
         f"to {summary['best_cost_moved_max']:.2%}: re-measurements of the same schedule merged into the kept record "
         "pool their costs"] if summary.get("best_cost_moved_tasks") else []) + [""]
    lines += ["## Kept per hardware", "", "| hardware | before | after |", "|---|---:|---:|"]
    lines += [f"| {r['hardware']} | {r['before']} | {r['after']} |" for r in summary["per_hardware"]]
    lines += ["", "## Kept per operator class", "", "| operator | before | after |", "|---|---:|---:|"]
    for r in tasks.group_by("op_class").agg(pl.col("before").sum(), pl.col("after").sum()).sort(
            "op_class").iter_rows():
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} |")
    qs = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
    lines += ["", f"## Label distribution (valid records; quantiles to 1/{LABEL_BINS})", "",
              "| quantile | before | after |", "|---|---:|---:|"]
    lines += [f"| {q} | {_hist_quantile(hist['hist_before'], q):.4f} | {_hist_quantile(hist['hist_after'], q):.4f} |"
              for q in qs]
    lines += ["", "## Kept per task", "", "| hardware | task | before | after |", "|---|---|---:|---:|"]
    lines += [f"| {r['hardware']} | {r['task_id']} | {r['before']} | {r['after']} |" for r in tasks.iter_rows(named=True)]
    return "\n".join(lines) + "\n"
