#!/bin/sh
# note-failure: the exit-queue command's first step, run only when an earlier step of the job
# failed (`when: on_fail`), and only for exit_condition: always. It leaves a mark for the
# exit-queue step, which cannot tell otherwise whether the job is failing. POSIX sh.
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

: >"$(orb_failed_marker)"
orb_say "an earlier step failed: exit-queue records the turn as failed"
