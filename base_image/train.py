"""Data-parallel MNIST training with Horovod: the job every distributetrain pod runs.

It follows the Horovod recipe (seed 004): initialise Horovod, pin one GPU per local
rank, scale the learning rate by the number of processes, wrap the optimizer so
gradients are averaged with all-reduce, start every rank from rank 0's weights, and
write checkpoints and logs on rank 0 only. Each rank trains on its own shard of the
data. A job that is restarted with the same --checkpoint-dir resumes after the last
saved epoch.

Elastic mode, chosen by horovodrun itself (`horovodrun --min-np M --max-np N
--host-discovery-script ...` sets HOROVOD_ELASTIC=1): weights, optimizer and epoch are
committed in memory after every epoch; when hosts are added or removed, or a rank dies,
the remaining ranks go back to the last commit, new ranks receive it from rank 0, and
training carries on at the new size with its learning rate and data shards recomputed.

Data: --data-dir DIR reads DIR/mnist.npz, laid out like Keras' MNIST file: uint8
arrays x_train (N, 28, 28), y_train (N,), x_test (M, 28, 28), y_test (M,), labels 0-9
(make_dataset.py writes a synthetic one). Without --data-dir a deterministic synthetic
set of the same shape is generated; each class is a fixed random pattern plus noise,
so the loss really falls.

Output (rank 0, stdout, one line each, key=value but for the world-size line):
  epoch=1 loss=0.812 accuracy=0.731 samples_per_sec=2100.5 size=3
  checkpoint=/ckpt/checkpoint-0001 epoch=1 rank=0
  resumed epoch=1 checkpoint_dir=/ckpt                (restarted: epoch 2 comes next)
  distributetrain: world size 3 -> 2 at epoch 2      (elastic: ranks changed)
  done start_epoch=0 epochs=3 loss=0.214 accuracy=0.950 test_accuracy=0.948 elapsed_s=12.3 size=3
Any failure prints a traceback to stderr and exits 1, so horovodrun and the chief pod
fail with it.

Only numpy is imported at module level: the argument, data and checkpoint helpers are
testable without TensorFlow or Horovod.
"""

import argparse
import os
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10
DATASET_FILE_NAME = "mnist.npz"

DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 64  # per rank
DEFAULT_LEARNING_RATE = 0.001  # per rank; multiplied by the number of ranks
DEFAULT_SYNTHETIC_SAMPLES = 3072  # training images; small enough for 3 ranks on 2 CPU cores
SYNTHETIC_TEST_FRACTION = 0.25  # test images generated per training image
DEFAULT_SEED = 1234

# Pixels of a class pattern that are lit, and the noise added to every image: enough
# noise that learning takes a few epochs, little enough that it clearly succeeds.
SYNTHETIC_PATTERN_DENSITY = 0.15
SYNTHETIC_NOISE_STDDEV = 0.6

# Several ranks share a node's CPU cores; one thread per op pool keeps them from
# oversubscribing it (TF's default is one thread per core, per process).
TF_THREADS_PER_POOL = 1

CHECKPOINT_PREFIX_FORMAT = "checkpoint-{epoch:04d}"
CHECKPOINT_INDEX_PATTERN = re.compile(r"^checkpoint-(\d+)\.index$")

ROOT_RANK = 0

# horovodrun sets this to 1 in every rank's environment when it runs elastically
# (--min-np/--max-np/--host-discovery-script); Horovod's own ops read it too.
HOROVOD_ELASTIC_ENV = "HOROVOD_ELASTIC"


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=_positive_int, default=DEFAULT_EPOCHS,
                        help="total epochs, counting those already checkpointed (default %(default)s)")
    parser.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE,
                        help="images per step on each rank (default %(default)s)")
    parser.add_argument("--lr", type=_positive_float, default=DEFAULT_LEARNING_RATE,
                        help="learning rate for one rank; scaled by the number of ranks (default %(default)s)")
    parser.add_argument("--samples", type=_positive_int, default=None,
                        help="training images to use: all of --data-dir's, or "
                             f"{DEFAULT_SYNTHETIC_SAMPLES} synthetic ones when not given")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"directory holding {DATASET_FILE_NAME}; synthetic data when omitted")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="where rank 0 saves a checkpoint every epoch and resumes from")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help="seed for synthetic data, weights and shuffling (default %(default)s)")
    return parser.parse_args(argv)


def synthetic_mnist(train_samples, test_samples, seed):
    """MNIST-shaped float32 images in [0, 1] and int64 labels, the same for the same seed.

    Returns (x_train, y_train, x_test, y_test); images have shape (n, 28, 28, 1).
    """
    rng = np.random.default_rng(seed)
    patterns = (rng.random((NUM_CLASSES,) + IMAGE_SHAPE) < SYNTHETIC_PATTERN_DENSITY).astype(np.float32)

    def draw(count):
        labels = rng.integers(0, NUM_CLASSES, size=count)
        noise = rng.normal(0.0, SYNTHETIC_NOISE_STDDEV, size=(count,) + IMAGE_SHAPE)
        images = np.clip(patterns[labels] + noise, 0.0, 1.0).astype(np.float32)
        return images, labels.astype(np.int64)

    x_train, y_train = draw(train_samples)
    x_test, y_test = draw(test_samples)
    return x_train, y_train, x_test, y_test


def load_mnist_npz(data_dir):
    """Reads DATASET_FILE_NAME from data_dir into the same form as synthetic_mnist."""
    path = Path(data_dir) / DATASET_FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --data-dir must hold {DATASET_FILE_NAME} "
                                "with x_train, y_train, x_test, y_test (see make_dataset.py)")
    with np.load(path) as arrays:
        missing = {"x_train", "y_train", "x_test", "y_test"} - set(arrays.files)
        if missing:
            raise ValueError(f"{path} lacks arrays {sorted(missing)}")
        splits = []
        for images_key, labels_key in (("x_train", "y_train"), ("x_test", "y_test")):
            images, labels = arrays[images_key], arrays[labels_key]
            if images.shape[1:] != IMAGE_SHAPE[:2] or labels.shape != images.shape[:1]:
                raise ValueError(f"{path}: {images_key} must be (N, 28, 28) and {labels_key} (N,), "
                                 f"got {images.shape} and {labels.shape}")
            splits.append((images.astype(np.float32)[..., np.newaxis] / 255.0, labels.astype(np.int64)))
    (x_train, y_train), (x_test, y_test) = splits
    return x_train, y_train, x_test, y_test


def load_dataset(args):
    """The dataset the flags ask for, with the training split cut to --samples."""
    if args.data_dir is None:
        train_samples = args.samples or DEFAULT_SYNTHETIC_SAMPLES
        test_samples = max(1, int(train_samples * SYNTHETIC_TEST_FRACTION))
        return synthetic_mnist(train_samples, test_samples, args.seed)
    x_train, y_train, x_test, y_test = load_mnist_npz(args.data_dir)
    if args.samples is not None:
        x_train, y_train = x_train[:args.samples], y_train[:args.samples]
    return x_train, y_train, x_test, y_test


def checkpoint_prefix(checkpoint_dir, epoch):
    return str(Path(checkpoint_dir) / CHECKPOINT_PREFIX_FORMAT.format(epoch=epoch))


def last_checkpoint_epoch(checkpoint_dir):
    """The highest epoch with a complete checkpoint in checkpoint_dir, or 0 if none.

    A checkpoint counts once its .index file exists: TensorFlow writes it after the data.
    """
    if checkpoint_dir is None or not Path(checkpoint_dir).is_dir():
        return 0
    epochs = [int(match.group(1)) for match in
              (CHECKPOINT_INDEX_PATTERN.match(entry.name) for entry in Path(checkpoint_dir).iterdir())
              if match]
    return max(epochs, default=0)


def steps_per_rank(samples, size, batch_size, split):
    """Steps every rank runs per pass: equal on all ranks, or the all-reduce would hang."""
    steps = samples // size // batch_size
    if steps == 0:
        raise ValueError(f"{split} split has {samples} images: too few for {size} ranks "
                         f"with --batch-size {batch_size}")
    return steps


def elastic_mode(environ):
    """Whether horovodrun runs this process as part of an elastic job."""
    return environ.get(HOROVOD_ELASTIC_ENV) == "1"


def world_size_line(before, after, epoch):
    """Rank 0's line when ranks were added or removed; epoch is the first one trained with `after`."""
    return f"distributetrain: world size {before} -> {after} at epoch {epoch}"


def format_record(head, **fields):
    """One key=value line, floats to 4 decimals, for the logs and tests to parse."""
    parts = [head] if head else []
    for key, value in fields.items():
        parts.append(f"{key}={value:.4f}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


def build_model(tf):
    """A small CNN: quick on CPU, and a real convolutional workload on GPUs."""
    layers = tf.keras.layers
    return tf.keras.Sequential([
        layers.Input(shape=IMAGE_SHAPE),
        layers.Conv2D(16, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        layers.Dense(NUM_CLASSES, activation="softmax"),
    ])


def train(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up chatter out of job logs
    import tensorflow as tf
    import horovod.tensorflow as hvd  # collectives: init, broadcast, allreduce
    import horovod.tensorflow.keras as hvd_keras  # Keras optimizer wrapper, callbacks and elastic state

    tf.config.threading.set_intra_op_parallelism_threads(TF_THREADS_PER_POOL)
    tf.config.threading.set_inter_op_parallelism_threads(TF_THREADS_PER_POOL)
    hvd.init()

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        # One GPU per process, chosen by the rank's index on its host.
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)

    started = time.perf_counter()
    tf.keras.utils.set_random_seed(args.seed)
    x_train, y_train, x_test, y_test = load_dataset(args)

    def shard(images, labels, shuffle):
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).shard(hvd.size(), hvd.rank())
        if shuffle:
            dataset = dataset.shuffle(len(images) // hvd.size() + 1, seed=args.seed + hvd.rank())
        return dataset.repeat().batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    model = build_model(tf)
    optimizer = hvd_keras.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=args.lr))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    # Slots now rather than at the first step, so a checkpoint restores them at once and
    # every rank, including one that joins an elastic job later, broadcasts the same variables.
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

    # Only rank 0 has the checkpoints, so it alone decides where training resumes; its
    # weights and epoch then go to every rank.
    start_epoch = 0
    if hvd.rank() == ROOT_RANK:
        start_epoch = last_checkpoint_epoch(args.checkpoint_dir)
        if start_epoch > 0:
            checkpoint.read(checkpoint_prefix(args.checkpoint_dir, start_epoch)).assert_consumed()
            print(format_record("resumed", epoch=start_epoch, checkpoint_dir=args.checkpoint_dir), flush=True)

    class EpochReport(tf.keras.callbacks.Callback):
        """Rank 0's per-epoch line and checkpoint; runs after the metrics are averaged.

        Every rank keeps the last logs: in elastic mode rank 0 may move to another process.
        """

        def __init__(self):
            super().__init__()
            self.last_logs = {}  # stays empty when every epoch was already checkpointed

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.last_logs = dict(logs)
            if hvd.rank() != ROOT_RANK:
                return
            samples = self.params["steps"] * args.batch_size * hvd.size()
            print(format_record(f"epoch={epoch + 1}", loss=float(logs["loss"]), accuracy=float(logs["accuracy"]),
                                samples_per_sec=samples / (time.perf_counter() - self.epoch_started),
                                size=hvd.size()), flush=True)
            if args.checkpoint_dir is not None:
                args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
                prefix = checkpoint.write(checkpoint_prefix(args.checkpoint_dir, epoch + 1))
                print(format_record(None, checkpoint=prefix, epoch=epoch + 1, rank=hvd.rank()), flush=True)

    report = EpochReport()

    def fit_and_evaluate(initial_epoch, extra_callbacks=()):
        """Trains epochs initial_epoch+1..args.epochs with the current ranks; the test accuracy."""
        # The recipe's learning-rate scaling, redone here because elastic mode changes the size.
        optimizer.learning_rate = args.lr * hvd.size()
        train_steps = steps_per_rank(len(x_train), hvd.size(), args.batch_size, "training")
        test_steps = steps_per_rank(len(x_test), hvd.size(), args.batch_size, "test")
        callbacks = [hvd_keras.callbacks.MetricAverageCallback(), report, *extra_callbacks]
        model.fit(shard(x_train, y_train, shuffle=True), steps_per_epoch=train_steps,
                  initial_epoch=initial_epoch, epochs=args.epochs, callbacks=callbacks, verbose=0)
        evaluation = model.evaluate(shard(x_test, y_test, shuffle=False), steps=test_steps, verbose=0,
                                    return_dict=True)
        return float(hvd.allreduce(tf.constant(evaluation["accuracy"]), op=hvd.Average))

    if elastic_mode(os.environ):
        # Weights, optimizer slots and these attributes live in host memory between commits;
        # when ranks come or go every rank returns to the last commit, then rank 0's state is
        # broadcast and fit_and_evaluate runs again with the new ranks.
        state = hvd_keras.elastic.KerasState(model, optimizer, epoch=start_epoch, start_epoch=start_epoch)

        class CommitEpoch(tf.keras.callbacks.Callback):
            """Commits after each epoch (after its line and checkpoint): a reset loses at most
            one epoch, and a change of hosts interrupts every rank at the same epoch.

            Not Horovod's UpdateEpochStateCallback: that expects fit to count epochs from 0
            after each reset, while here Keras numbers them from the checkpointed epoch.
            """

            def on_epoch_end(self, epoch, logs=None):
                state.epoch = epoch + 1
                state.commit()  # raises HostsUpdatedInterrupt when hosts were added or removed

        commit = CommitEpoch()
        trained_size = hvd.size()  # this process's last world size, to report a change once

        @hvd_keras.elastic.run
        def elastic_fit_and_evaluate(state):
            nonlocal trained_size
            if hvd.size() != trained_size and hvd.rank() == ROOT_RANK:
                print(world_size_line(trained_size, hvd.size(), state.epoch + 1), flush=True)
            trained_size = hvd.size()
            return fit_and_evaluate(state.epoch, [commit])

        test_accuracy = elastic_fit_and_evaluate(state)
        start_epoch = state.start_epoch
    else:
        start_epoch = hvd.broadcast_object(start_epoch, root_rank=ROOT_RANK)
        hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=ROOT_RANK)
        test_accuracy = fit_and_evaluate(start_epoch)

    if hvd.rank() == ROOT_RANK:
        print(format_record("done", start_epoch=start_epoch, epochs=args.epochs,
                            loss=float(report.last_logs.get("loss", float("nan"))),
                            accuracy=float(report.last_logs.get("accuracy", float("nan"))),
                            test_accuracy=test_accuracy, elapsed_s=time.perf_counter() - started,
                            size=hvd.size()), flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        train(args)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
