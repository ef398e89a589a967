"""Linear regression on scikit-learn's bundled diabetes data as an elastic edl job."""

import torch
import torch.nn.functional as F
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

import edl.runtime.trainer as edl

torch.set_num_threads(1)
torch.manual_seed(0)

data = load_diabetes()  # features already centred and scaled
x = torch.tensor(data.data, dtype=torch.float32)
y = torch.tensor(data.target, dtype=torch.float32).unsqueeze(1)
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
mean, std = y_train.mean(), y_train.std()

model = torch.nn.Linear(x.shape[1], 1)
job = edl.connect(model, "adam", lr=0.05)

for features, target in job.batches(TensorDataset(x_train, (y_train - mean) / std), batch_size=16):
    job.step(F.mse_loss(model(features), target))

job.sync()
with torch.no_grad():
    pred = model(x_test) * std + mean
    mse = F.mse_loss(pred, y_test).item()
    r2 = 1 - mse / y_test.var(unbiased=False).item()
print(f"test MSE {mse:.1f}, R^2 {r2:.3f} after {job.steps} steps on this trainer")
job.report(mse=mse, r2=r2)
job.close()
