"""The pure parts of base_image/train.py: flags, data, checkpoint discovery, elastic mode.

train.py imports TensorFlow and Horovod only inside train(), so these run in any
environment with numpy; the real training runs in tests/e2e/test_horovod_local.py and
tests/e2e/test_elastic_local.py.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BASE_IMAGE_DIR = Path(__file__).resolve().parents[3] / "base_image"


def _load_module(name):
    spec = importlib.util.spec_from_file_location(name, BASE_IMAGE_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = _load_module("train")


def test_defaults_are_small_enough_for_cpu():
    args = train.parse_args([])
    assert (args.epochs, args.batch_size, args.lr, args.seed) == (
        train.DEFAULT_EPOCHS, train.DEFAULT_BATCH_SIZE, train.DEFAULT_LEARNING_RATE, train.DEFAULT_SEED)
    assert args.samples is None and args.data_dir is None and args.checkpoint_dir is None


def test_flags_are_parsed_into_typed_values():
    args = train.parse_args(["--epochs", "5", "--batch-size", "32", "--lr", "0.01", "--samples", "100",
                             "--data-dir", "/data", "--checkpoint-dir", "/ckpt", "--seed", "7"])
    assert (args.epochs, args.batch_size, args.lr, args.samples, args.seed) == (5, 32, 0.01, 100, 7)
    assert (args.data_dir, args.checkpoint_dir) == (Path("/data"), Path("/ckpt"))


@pytest.mark.parametrize("flags", [["--epochs", "0"], ["--batch-size", "-1"], ["--lr", "0"],
                                   ["--samples", "x"], ["--unknown"]])
def test_bad_flags_exit_with_usage_error(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(flags)
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_synthetic_data_has_mnist_shape_and_is_deterministic():
    first = train.synthetic_mnist(200, 50, seed=3)
    second = train.synthetic_mnist(200, 50, seed=3)
    x_train, y_train, x_test, y_test = first
    assert x_train.shape == (200, 28, 28, 1) and x_test.shape == (50, 28, 28, 1)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(y_train)) == set(range(train.NUM_CLASSES))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(x_train, train.synthetic_mnist(200, 50, seed=4)[0])


def test_synthetic_classes_are_separable_by_their_mean_image():
    """A nearest-class-mean classifier beats chance by far, so a CNN can learn the set."""
    x_train, y_train, x_test, y_test = train.synthetic_mnist(2000, 500, seed=1)
    means = np.stack([x_train[y_train == label].mean(axis=0) for label in range(train.NUM_CLASSES)])
    distances = ((x_test[:, np.newaxis] - means[np.newaxis]) ** 2).sum(axis=(2, 3, 4))
    accuracy = (distances.argmin(axis=1) == y_test).mean()
    assert accuracy > 0.8


def test_load_dataset_cuts_synthetic_set_to_samples():
    x_train, y_train, x_test, y_test = train.load_dataset(train.parse_args(["--samples", "400"]))
    assert len(x_train) == len(y_train) == 400
    assert len(x_test) == int(400 * train.SYNTHETIC_TEST_FRACTION)


def test_make_dataset_writes_what_data_dir_reads(tmp_path):
    make_dataset = _load_module("make_dataset")
    make_dataset.main(["--output-dir", str(tmp_path), "--train-samples", "120", "--test-samples", "30"])
    with np.load(tmp_path / train.DATASET_FILE_NAME) as arrays:
        assert arrays["x_train"].shape == (120, 28, 28) and arrays["x_train"].dtype == np.uint8
        assert arrays["y_test"].shape == (30,)

    x_train, y_train, x_test, y_test = train.load_dataset(
        train.parse_args(["--data-dir", str(tmp_path), "--samples", "100"]))
    assert x_train.shape == (100, 28, 28, 1) and x_test.shape == (30, 28, 28, 1)
    expected = train.synthetic_mnist(120, 30, train.DEFAULT_SEED)[0][:100]
    np.testing.assert_allclose(x_train, expected, atol=1 / 255)


def test_missing_dataset_file_names_the_expected_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="x_train, y_train, x_test, y_test"):
        train.load_mnist_npz(tmp_path)


def test_dataset_with_wrong_shape_is_rejected(tmp_path):
    np.savez(tmp_path / train.DATASET_FILE_NAME, x_train=np.zeros((4, 32, 32), np.uint8),
             y_train=np.zeros(4, np.uint8), x_test=np.zeros((2, 28, 28), np.uint8), y_test=np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"x_train must be \(N, 28, 28\)"):
        train.load_mnist_npz(tmp_path)


def _touch_checkpoint(directory, epoch, complete=True):
    prefix = Path(train.checkpoint_prefix(directory, epoch))
    prefix.with_name(prefix.name + ".data-00000-of-00001").write_bytes(b"")
    if complete:
        prefix.with_name(prefix.name + ".index").write_bytes(b"")


def test_no_checkpoint_dir_or_empty_dir_starts_at_epoch_zero(tmp_path):
    assert train.last_checkpoint_epoch(None) == 0
    assert train.last_checkpoint_epoch(tmp_path / "absent") == 0
    assert train.last_checkpoint_epoch(tmp_path) == 0


def test_resume_epoch_is_the_highest_complete_checkpoint(tmp_path):
    for epoch in (1, 2, 10):
        _touch_checkpoint(tmp_path, epoch)
    _touch_checkpoint(tmp_path, 11, complete=False)  # cut off while being written
    (tmp_path / "checkpoint-junk.index").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert train.last_checkpoint_epoch(tmp_path) == 10


def test_checkpoint_names_sort_by_epoch(tmp_path):
    assert train.checkpoint_prefix(tmp_path, 3) == str(tmp_path / "checkpoint-0003")


def test_every_rank_runs_the_same_number_of_steps():
    assert train.steps_per_rank(1000, 3, 64, "training") == 5  # 333 images per rank -> 5 full batches
    with pytest.raises(ValueError, match="too few"):
        train.steps_per_rank(100, 4, 64, "test")


def test_records_are_key_value_lines():
    assert train.format_record("epoch=2", loss=0.123456, size=3) == "epoch=2 loss=0.1235 size=3"
    assert train.format_record(None, checkpoint="/c/checkpoint-0001", rank=0) == "checkpoint=/c/checkpoint-0001 rank=0"


def test_elastic_mode_follows_horovodrun():
    # horovodrun --host-discovery-script (or --min-np/--max-np) sets HOROVOD_ELASTIC=1 in every rank.
    assert train.elastic_mode({"HOROVOD_ELASTIC": "1", "HOROVOD_RANK": "0"})
    assert not train.elastic_mode({"HOROVOD_RANK": "0"})  # plain horovodrun -np N
    assert not train.elastic_mode({"HOROVOD_ELASTIC": "0"})


def test_world_size_line_names_both_sizes_and_the_first_epoch_at_the_new_size():
    assert train.world_size_line(2, 1, 3) == "distributetrain: world size 2 -> 1 at epoch 3"
