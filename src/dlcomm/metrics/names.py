"""Every metric name dlcomm logs. docs/metrics.md lists them with their meaning; the report
reads the same constants. Times are seconds, traffic is per rank per iteration."""

# Per iteration (MLflow step = iteration), mean over ranks.
ITER_TIME = "iter/time_s"  # wall time of the iteration
ITER_COMPUTE = "iter/compute_s"  # iteration time not blocked on communication
ITER_COMM_EXPOSED = "iter/comm_exposed_s"  # time blocked waiting for communication
ITER_COMM_BUSY = "iter/comm_busy_s"  # time with at least one operation in flight
ITER_BYTES = "iter/bytes_sent"  # bytes this rank sent (logical traffic, see comm/traffic.py)
ITER_MESSAGES = "iter/messages"  # messages this rank sent
ITER_LOSS = "iter/train_loss"  # mean training loss of the iteration over ranks
ITER_LR = "iter/lr"

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

# Once per run.
FINAL_TEST_ACC = "final/test_acc_mean"
FINAL_TEST_ACC_AVG_MODEL = "final/test_acc_avg_model"
FINAL_TRAIN_LOSS = "final/train_loss"
FINAL_TIME_PER_ITER = "final/time_per_iter_s"
FINAL_COMM_SHARE = "final/comm_share"
FINAL_STEPS = "final/steps"
PEAK_RSS_MIB = "memory/peak_rss_mib"  # peak resident set of each rank (MLflow step = rank)
PEAK_PSS_MIB = "memory/peak_pss_mib"  # peak proportional set (shared pages split among sharers)

# Columns of the per-iteration timing table (artifact timings.csv: one row per rank and iteration).
TIMING_COLUMNS = (
    "rank",
    "node",
    "epoch",
    "step",
    "time_s",
    "compute_s",
    "comm_exposed_s",
    "comm_busy_s",
    "data_s",
    "bytes_sent",
    "messages",
    "loss",
)
