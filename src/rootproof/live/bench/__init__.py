"""The live benchmark: real faults in a private live environment, diagnosed through the live
backends, recovered behind approval, verified, cleaned up and audited (docs/live-benchmark.md).

- `faults`: the five faults (inject, confirm, cleanup, residue) and their holder processes;
- `recovery`: the recovery executor (whitelist, preconditions, approval policy, audit records);
- `scenarios`: each scenario's question, recovery contract and ground truth;
- `runner`: the phases, the scoring and the persisted evaluation run;
- `record`: a live run's tool results frozen into a snapshot scenario folder.
"""
