"""The status object: what the last cycle decided and why, in a ConfigMap any user can read
with kubectl (in the spirit of cluster-autoscaler's status ConfigMap).

The files, lowest first: doc.py (the document's types), codec.py (to and from the
ConfigMap's JSON), build.py (one cycle -> the next document), writer.py, view.py.

Pure: `build_status` turns one cycle (snapshot, plan, write outcomes) and the previous
status into the next; `to_data`/`from_data` are the ConfigMap's `data`. The writer
(writer.py) and the CLI (`status`, `explain`: view.py) are the I/O around it.

What it holds: when, the cycle's result, per queue the headroom and what bounded it, GPUs
in flight, waiting gangs and what happens to them, grants and reclaims, and the jobs one by
one, most urgent first: refused by the API, resizing, invalid, held. Each job carries its
reason and since when, and a resize state (`requested -> running -> settled`, or
`rejected` with the API's message). Why the resize state lives here and not in an
annotation on the job: a refused write cannot annotate the job it was refused on (the
same policy or RBAC refuses the annotation), and every state change written onto the job
would bump its resourceVersion, wake training-operator and race its own writes, at 10k
jobs once per job per step. One object in our namespace costs one write per change.

Bounded at any cluster size: jobs and gangs listed one by one are capped at
`status_max_jobs` each (the rest counted per queue and reason, which are always
complete), and the whole document is kept under MAX_BYTES (far below the 1 MiB a ConfigMap
may hold) by listing fewer jobs. A message is never cut: the end of a reason's message is
the part that says what to do, so a job is listed whole or counted among those left out
(`omitted_jobs`, `omitted_gangs`), and `explain --live` plans any job whole.
"""
