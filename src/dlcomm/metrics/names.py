"""Every metric name dlcomm logs. docs/metrics.md lists them with their meaning; the report
reads the same constants. Times are seconds, traffic is per rank per iteration."""

# Per iteration (MLflow step = iteration), mean over ranks.
ITER_TIME = "iter/time_s"  # wall time of the iteration
ITER_COMPUTE = "iter/compute_s"  # iteration time not blocked on communication
ITER_COMM_EXPOSED = "iter/comm_exposed_s"  # time blocked while communication moved data
ITER_PEER_WAIT = "iter/peer_wait_s"  # time blocked before the peers reached the operation (threads)
ITER_BATCHED_SHARE = (
    "iter/batched_share_s"  # launcher.compute=batched: the rank's 1/N of the batched call (in compute_s)
)
ITER_COMM_BUSY = "iter/comm_busy_s"  # time with at least one operation in flight
ITER_BYTES = "iter/bytes_sent"  # bytes this rank sent (logical traffic, see comm/traffic.py)
ITER_MESSAGES = "iter/messages"  # messages this rank sent
# Under a network model (network.mode=emulate|simulate), on the modelled cluster's clock:
# the virtual clock in simulate mode, the wall clock in emulate mode. Absent under network=off.
ITER_SIM_TIME = "iter/sim_time_s"  # the iteration's time on the modelled cluster
ITER_SIM_COMPUTE = "iter/sim_compute_s"  # sim_time_s minus sim_comm_exposed_s
ITER_SIM_COMM_EXPOSED = "iter/sim_comm_exposed_s"  # waiting for modelled communication
ITER_SIM_COMM_BUSY = "iter/sim_comm_busy_s"  # union of the operations' modelled [start, end]
ITER_COMM_MODELLED = "iter/comm_modelled_s"  # cost-model durations of the collectives joined and messages sent
ITER_LOSS = "iter/train_loss"  # mean training loss of the iteration over ranks
# Streamed while an epoch runs (tracking.stream_every_s), rank 0's own: what a run that dies mid-epoch keeps.
LIVE_LOSS = "live/train_loss_rank0"
LIVE_TIME = "live/time_s_rank0"

# Per epoch (MLflow step = epoch, counted from 1).
EPOCH_TRAIN_LOSS = "epoch/train_loss"  # mean over ranks and iterations of the epoch
EPOCH_TEST_ACC_MEAN = "epoch/test_acc_mean"  # mean over workers of each replica's test accuracy
EPOCH_TEST_ACC_AVG_MODEL = "epoch/test_acc_avg_model"  # test accuracy of the averaged model
EPOCH_CONSENSUS = "epoch/consensus_distance"  # mean_i ||x_i - x_bar||^2
EPOCH_SAMPLES_PER_S = "epoch/samples_per_s"  # all workers' samples / epoch wall time
EPOCH_WALL = "epoch/wall_time_s"  # wall time since training started
EPOCH_TIME_PER_ITER = "epoch/time_per_iter_s"  # mean iteration time of the epoch
EPOCH_COMPUTE_PER_ITER = "epoch/compute_per_iter_s"
EPOCH_COMM_EXPOSED_PER_ITER = "epoch/comm_exposed_per_iter_s"
EPOCH_COMM_SHARE = "epoch/comm_share"  # exposed communication / iteration time
EPOCH_PEER_WAIT_PER_ITER = "epoch/peer_wait_per_iter_s"  # waiting for peers (threads; absent for processes)
EPOCH_PEER_WAIT_SHARE = "epoch/peer_wait_share"  # peer_wait / iteration time
EPOCH_LR = "epoch/lr"  # the learning rate the next epoch starts at (the schedule stepped through this one)
EPOCH_TRAIN_TIME = "epoch/train_time_s"  # wall training time so far (iterations only, no evaluation)
EPOCH_SIM_TIME_PER_ITER = "epoch/sim_time_per_iter_s"
EPOCH_SIM_COMM_EXPOSED_PER_ITER = "epoch/sim_comm_exposed_per_iter_s"
EPOCH_SIM_COMM_SHARE = "epoch/sim_comm_share"  # sim_comm_exposed / sim_time
EPOCH_COMM_MODELLED_PER_ITER = "epoch/comm_modelled_per_iter_s"
EPOCH_SIM_TIME = "epoch/sim_time_s"  # simulated training time so far: max over ranks of their summed sim_time_s
# The task's parts of the loss (dlcomm.tasks), mean over workers and the epoch's iterations:
EPOCH_GAN_D_LOSS = "epoch/gan_d_loss"  # task=gan: the discriminator's loss L_D
EPOCH_GAN_G_LOSS = "epoch/gan_g_loss"  # task=gan: the generator's loss L_G


def epoch_part(name: str) -> str:
    """The per-epoch metric of the task's loss part ``name``."""
    return f"epoch/{name}"


# Evaluations on the training clock (train.eval_every_s): MLflow step = iteration. The clock is
# simulated under network.mode=simulate, else the wall time of the iterations.
CLOCK_TIME = "clock/time_s"  # the training clock when the evaluation ran (max over workers)
CLOCK_TEST_ACC_MEAN = "clock/test_acc_mean"
CLOCK_TEST_ACC_AVG_MODEL = "clock/test_acc_avg_model"

# Once per run.
FINAL_TEST_ACC = "final/test_acc_mean"
FINAL_TEST_ACC_AVG_MODEL = "final/test_acc_avg_model"
FINAL_BEST_TEST_ACC = "final/best_test_acc_mean"  # best mean test accuracy of all evaluations (epochs and clock)
FINAL_CLOCK_TIME = "final/clock_time_s"  # the training clock at the end (max over workers; see CLOCK_TIME)
FINAL_TRAIN_LOSS = "final/train_loss"
FINAL_TIME_PER_ITER = "final/time_per_iter_s"
FINAL_COMM_SHARE = "final/comm_share"
FINAL_PEER_WAIT_SHARE = "final/peer_wait_share"  # waiting for peers / iteration time (threads)
FINAL_STEPS = "final/steps"
FINAL_TRAIN_TIME = "final/train_time_s"  # wall time of all iterations
FINAL_SIM_TIME_PER_ITER = "final/sim_time_per_iter_s"
FINAL_SIM_COMM_SHARE = "final/sim_comm_share"
FINAL_COMM_MODELLED_PER_ITER = "final/comm_modelled_per_iter_s"
FINAL_BYTES_PER_ITER = "final/bytes_sent_per_iter"  # mean over ranks and iterations of the bytes a rank sent
FINAL_PEAK_BYTES_PER_ITER = "final/peak_bytes_sent_per_iter"  # the most bytes one rank sent in one iteration
FINAL_SIM_TIME = "final/sim_time_s"  # simulated training time of the run
FINAL_TIME_TO_TARGET = "final/train_time_to_target_s"  # wall training time when train.target_acc was first reached
FINAL_SIM_TIME_TO_TARGET = "final/sim_time_to_target_s"  # the same on the modelled cluster's clock
FINAL_OVERRUNS = "final/emulation_overruns"  # operations whose real transfer outlasted the model
# The same figures in the units people read (the MLflow UI shows raw values): beside the raw ones.
FINAL_MS_PER_ITER = "final/ms_per_iter"
FINAL_COMPUTE_MS = "final/compute_ms"
FINAL_COMM_EXPOSED_MS = "final/comm_exposed_ms"
FINAL_PEER_WAIT_MS = "final/peer_wait_ms"
FINAL_SAMPLES_PER_S = "final/samples_per_s"
FINAL_TEST_ACC_PCT = "final/test_acc_pct"
FINAL_SIM_MS_PER_ITER = "final/sim_ms_per_iter"
FINAL_SIM_COMM_EXPOSED_MS = "final/sim_comm_exposed_ms"
PEAK_RSS_MIB = "memory/peak_rss_mib"  # peak resident set: the largest rank's; "<name>/rank<r>" each rank's (processes)
PEAK_PSS_MIB = "memory/peak_pss_mib"  # peak proportional set (shared pages split among sharers), the same way
RANK_HOSTS = "rank_hosts"  # tag: each worker's host name in rank order, comma-separated (num_hosts: how many differ)

# The columns of the per-iteration timing table (artifact timings.csv) are the fields of
# dlcomm.metrics.rows.IterationRow (TIMING_COLUMNS there).

# Algorithms' statistics (Algorithm.take_metrics, aggregated by dlcomm.metrics.stats): each is
# logged as epoch/<name> (MLflow step = epoch) and final/<name> (the whole run); a mean of
# per-iteration observations also as the series iter/<name> (MLflow step = iteration, mean over ranks).
PS_DROPPED_FRACTION = (
    "ps_dropped_fraction"  # ps, ps_layerdrop: fraction of gradient entries in the layers a worker dropped
)
PS_SERVER_COMPUTE = "ps_server_compute_s"  # ps, ps_layerdrop: the server's averaging and optimizer step, per iteration
PULL_STALENESS = "pull_staleness_steps"  # gossip_pull: steps between a pull's issue and its averaging
PULLS = "pulls"  # gossip_pull: pulls made (models averaged in) per worker
PULLS_SERVED = "pulls_served"  # gossip_pull: pulls answered (models sent) per worker
PULL_CONFLICTS = "pull_conflicts"  # gossip_pull (autonomous): reservations refused per worker
PULL_SKIPPED_WINDOWS = "pull_skipped_windows"  # gossip_pull: windows ended without a peer, per worker
# The gossip family's statistic (dpsgd, sgp, crossover, crossover_hier, ...) is the consensus
# distance EPOCH_CONSENSUS above, measured at every evaluation for every algorithm.


def iter_stat(name: str) -> str:
    """The per-iteration series of the algorithm statistic ``name``."""
    return f"iter/{name}"


def epoch_stat(name: str) -> str:
    """The per-epoch metric of the algorithm statistic ``name``."""
    return f"epoch/{name}"


def final_stat(name: str) -> str:
    """The whole run's value of the algorithm statistic ``name``."""
    return f"final/{name}"


FINAL_PS_DROPPED_FRACTION = final_stat(PS_DROPPED_FRACTION)  # the report's "layers dropped %"
