#!/usr/bin/env bash
# Every queued study, in the order the open issues need them: the Multi30k part of the studies
# issue (the en->fr score, feature and structure studies, then English -> German), the
# embedded-corpus reruns at the plateau and Fig. 2 with three seeds (the rest of that issue),
# then the attend-to issue's Multi30k measurements. Each script is resumable on its own (finished
# runs are skipped, an unfinished one resumes from its last checkpoint where the working tree
# kept it); one that fails does not stop the next, and the exit status says whether all passed.
#
#     nohup nice bash experiments/studies.sh > runs/studies.log 2>&1 &
cd "$(dirname "$0")/.."
status=0
bash experiments/multi30k_studies.sh studies || status=1
bash experiments/embedded_studies.sh || status=1
bash experiments/multi30k_studies.sh attend-to || status=1
exit $status
