"""The tiny regression model and dataset the Trainer scripts share (imports torch)."""

import torch


class Model(torch.nn.Module):
    """Two linear layers; ``forward`` returns the loss and the predictions as the Trainer wants."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, x, labels=None):
        pred = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}


class Data(torch.utils.data.Dataset):
    """256 fixed random samples (seed 0) of 16 features and one label."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}
