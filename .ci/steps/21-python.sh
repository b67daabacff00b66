#!/usr/bin/env bash
# The courant Python package (client/python): built into the venv target/py (`python_env`,
# .ci/lib.sh) and its pytest suite run against real `courant serve` processes
# (target/debug/courant): journals, publishing and read-committed consumption, a consumer
# killed with SIGKILL mid-stream that resumes from its SQLite checkpoint, the interop
# examples, and the error paths. Arguments go to pytest: `bash .ci/steps/21-python.sh -k crash`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
PY=$(python_env)
COURANT_BIN=$(courant_bin)
export COURANT_BIN
echo "python: $("$PY" --version); courant: $COURANT_BIN"
(cd client/python && timeout 1200 "$PY" -m pytest -q -p no:cacheprovider tests "$@")
