#!/bin/bash
# Data and models of the verifier's acceptance run (reports/verify.md), from the repository root:
#
#     bash benchmarks/verify_acceptance/prepare.sh
#     python -m tenset_curate.verifier ...        # the command printed in reports/verify.md (finished runs are reused)
#
# What each arm is, and the commit its pruned training set was made at, is in notes.md (the text verify.md quotes).
# `curate prune` has changed between those commits, so the pruned sets this script makes today hold other records;
# run it from the commit notes.md names to rebuild a given arm exactly.
set -euo pipefail
cd "$(dirname "$0")/../.."
A=runs/verify-acceptance
curate convert data/sample-cpu --out $A/ds --json
curate splits make $A/ds --scheme within-task --name wt --seed 0 --json
rm -rf $A/ds-pruned-v2
curate prune $A/ds --ratio 0.45 --method hybrid --seed 0 --out $A/ds-pruned-v2 --json
curate splits make $A/ds-pruned-v2 --scheme within-task --name wt --seed 0 --json
for d in ds ds-pruned-v2; do
  tag=$([ $d = ds ] && echo full || echo pruned)
  # session 6: within-task flat features and tokens centred within the task (the defaults of curate train)
  curate train $A/$d --split wt --model attention --out $A/models/attn-tk-$tag --seed 0 --json
  # session 5: within-task flat features only
  curate train $A/$d --split wt --model attention --out $A/models/attn-tr-$tag --seed 0 --json --raw-tokens
done
# session 8: the pruned set of today's `curate prune` (hybrid keeps each task's fastest programs first), for the
# tok1-era run of reports/verify-current (in git history before session 33); attn-tk-full above is its full-data twin
rm -rf $A/ds-pruned-v3
curate prune $A/ds --ratio 0.45 --method hybrid --seed 0 --out $A/ds-pruned-v3 --json
curate splits make $A/ds-pruned-v3 --scheme within-task --name wt --seed 0 --json
curate train $A/ds-pruned-v3 --split wt --model attention --out $A/models/attn-tk-pruned-v3 --seed 0 --json
# session 33: reports/verify-current (notes_current.md), today's features (tok2) and defaults; the pruned twin prunes
# only the split's training records (`--split wt`), so both models stop early on the same validation records
rm -rf $A/ds-pruned-tok2
curate prune $A/ds --ratio 0.45 --method hybrid --seed 0 --split wt --out $A/ds-pruned-tok2 --json
curate train $A/ds --split wt --model attention --out $A/models/attn-tok2-full --seed 0 --json
curate train $A/ds-pruned-tok2 --split wt --model attention --out $A/models/attn-tok2-pruned --seed 0 --json
# session 34: the pruned twin made the way the README advises for shards the attention model trains on (`--method
# density`; reports/prune_models.md), beside the hybrid one above; the suffix pairs it with attn-tok2-full
rm -rf $A/ds-pruned-density-tok2
curate prune $A/ds --ratio 0.45 --method density --seed 0 --split wt --out $A/ds-pruned-density-tok2 --json
curate train $A/ds-pruned-density-tok2 --split wt --model attention --out $A/models/attn-tok2-pruned-density --seed 0 --json
