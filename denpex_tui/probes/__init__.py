"""Live measurements that decide between the causes of ENOSPC and EMFILE (domain core: no
textual, no rich, no network, never writes to a watched path).

Public API (stable; other parts of Denpex import these):

* ``processes.find_training_processes(include_helpers=False) -> list[TrainingProcess]``
  (pid, ppid, rank, local_rank, world_size, cmdline, create_time, role); also ``read_stat``,
  ``read_cmdline``, ``read_environ``, ``create_time_from_ticks``.
* ``readings``: ``ProcessReading``, ``PathReading``, ``Snapshot`` (``to_json()`` = the schema-1
  face of ``denpex probe --json`` / ``--stream``).
* ``sampler.Prober(pids=None, paths=(), ...)`` with ``snapshot() -> Snapshot`` and
  ``add_path(path, why, source_line=None)``; ``sampler.read_path(path)``.
* ``facade.read_process(pid, expect_create_time=None, ...)``: never raises, degrades to
  ``readable=False`` with null readings.
* ``trends.TrendTracker``: ``ingest(snapshot)``, ``note_checkpoint_save(rank, time,
  local_rank=None)``, ``process_trend(pid)``, ``path_trend(path)``, ``fd_growth_per_save(pid)``,
  ``eta_lines()``.
* ``conditions.parse_condition(text) -> Condition`` (``evaluate(metrics) -> bool | None``),
  ``conditions.METRICS``.
* ``differential.differential(signature_id, path, snapshot, trends) -> Differential``,
  ``differential.differential_kind(signature_id)``; its candidates in ``candidates``, the
  checklist metrics in ``metrics.metrics_for(path, snapshot, trends=None) -> dict``, the
  bounded ``du.du_filesystem(mount)``.
* ``logpaths.paths_from_logs(paths) -> list[WatchPath]``, ``scan_logs(paths) -> LogScan``
  (watch paths, ENOSPC/EMFILE error lines, checkpoint-save lines), ``LogFollower``.
* ``cli.add_parser(subparsers)`` / ``cli.run(args) -> int``: ``denpex probe``.
* ``wire.snapshot_from_json(obj)`` / ``wire.parse_line(line)``: a schema-1 snapshot read
  back (a remote node's stream); ``wire.WireError`` (kind garbage / other-schema / invalid).
* ``source``: ``ProbeSource`` (``snapshot``, ``read_path``, ``du``), ``LocalSource``,
  ``StreamSource``; ``differential(..., source=)`` and ``metrics_for(..., source=)`` use it.
* ``transports``: ``ChannelSpec``, ``ssh_channels``, ``kubectl_channels``, ``slurm_channels``,
  ``template_channels`` (``--probe-cmd``, quoted by ``core.commands.render_probe_command``).
* ``fleet.Fleet(specs)``: ``start()``, ``step(timeout)``, ``merged()``, ``merged_json()``,
  ``node_json()``, ``source(node)``, ``stop()``; ``fleet.skew``: a ``skew.SkewEstimator``
  (``offsets()`` per node name, ``compare(node_a, t_a, node_b, t_b) -> Ordering``,
  ``resolution()``) for ordering failures across nodes.

Nothing is imported here, so ``import denpex_tui.core.conditions`` stays cheap.
"""
