"""Writes a synthetic MNIST-shaped dataset in the layout train.py --data-dir reads.

Useful to exercise the file-reading path (and shared-volume mounts) without
downloading MNIST: DIR/mnist.npz gets uint8 x_train (N, 28, 28), y_train (N,),
x_test (M, 28, 28), y_test (M,), the same arrays Keras' mnist.npz holds.

    python make_dataset.py --output-dir /data --train-samples 6000 --test-samples 1000
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import DATASET_FILE_NAME, DEFAULT_SEED, synthetic_mnist  # noqa: E402

PIXEL_MAX = 255  # uint8 pixel scale used by Keras' MNIST file


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--train-samples", type=int, default=6000)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = synthetic_mnist(args.train_samples, args.test_samples, args.seed)

    def to_uint8(images):
        return np.rint(images[..., 0] * PIXEL_MAX).astype(np.uint8)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / DATASET_FILE_NAME
    np.savez_compressed(path, x_train=to_uint8(x_train), y_train=y_train.astype(np.uint8),
                        x_test=to_uint8(x_test), y_test=y_test.astype(np.uint8))
    print(path)


if __name__ == "__main__":
    main()
