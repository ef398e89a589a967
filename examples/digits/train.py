"""Digits classifier (scikit-learn's bundled 8x8 digits) as an elastic edl job.

Run by `edl trainer` (the TrainingJob's entrypoint); every trainer runs this
same script and they share the work through the master's tasks.
"""

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

import edl.runtime.trainer as edl

torch.set_num_threads(1)
torch.manual_seed(0)

digits = load_digits()
x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target, dtype=torch.long)
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
train_set = TensorDataset(x_train, y_train)

model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
)
job = edl.connect(model, "adam", lr=0.001)

for images, labels in job.batches(train_set, batch_size=32):
    job.step(F.cross_entropy(model(images), labels))

job.sync()  # the final parameters from the pservers
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"test accuracy {accuracy:.4f} after {job.steps} steps on this trainer")
job.report(accuracy=accuracy)
job.close()
