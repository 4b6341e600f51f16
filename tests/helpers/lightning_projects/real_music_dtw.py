"""Score-to-audio alignment with a learned feature extractor, from the DecDTW experiments
(a public repository found by code search, file id 24504741734: `class MusicDTWNet` in the
audio experiment's training script).

Kept as written: `MusicDTWNet` (two bidirectional GRU backbones, the second a `deepcopy` of the
first, Adam over two param groups, `save_hyperparameters()`, ground-truth warps read from
`self.trainer.datamodule.train.gt` / `.val.gt` / `.test.gt` under `no_grad`, the time error and
time deviation integrals, `train/time_err`, `train/time_dev`, epoch-only `train/..._epoch` and
`train/loss` logged by the model itself, `val/...` and `log_dict` of `test/...` means,
`test_step` returning its dict of per-item tensors), and the driver: `seed_everything` after
the DataModule is built, `ModelCheckpoint(monitor="val/loss", mode="min",
filename='{epoch:02d}-{val/loss:.4f}')` (a metric name with a slash in the file name),
`Trainer(logger=False, log_every_n_steps=10, val_check_interval=0.5)`, then
`trainer.test(model, datamodule=dm, ckpt_path='best')`.
Substituted: the DecDTW layer is a soft alignment written here (a softmax over feature
similarities giving the expected performance time of each score frame, its negative
similarity as the DTW cost), `BatchedSignal` a small piecewise-linear signal with the same
`times`/`values`/`shape`/indexing/call, and `MusicDM` twelve synthetic slices of random
features with monotone ground-truth alignments; `loss_fn="time_err"` (its own default path
through the generalised DTW); sizes and epochs shrunk (two epochs of six batches).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import trainer as pl
from trainer.callbacks import ModelCheckpoint


class BatchedSignal:
    def __init__(self, values, times):
        self.values, self.times = values, times

    @property
    def shape(self):
        return self.values.shape

    def __getitem__(self, i):
        return BatchedSignal(self.values[i:i + 1], self.times[i:i + 1])

    def __call__(self, t):
        idx = torch.searchsorted(self.times.contiguous(), t.contiguous()).clamp(1, self.times.shape[1] - 1)
        t0, t1 = self.times.gather(1, idx - 1), self.times.gather(1, idx)
        v0, v1 = self.values.gather(1, idx - 1), self.values.gather(1, idx)
        frac = ((t - t0) / (t1 - t0)).clamp(0, 1)
        return v0 + frac * (v1 - v0)


class DecDTWLayer(nn.Module):
    def forward(self, ps, ss, reg_wt):
        sim = ss.values @ ps.values.transpose(1, 2)
        self.attn = torch.softmax(sim / reg_wt, dim=-1)
        self.sim = sim
        return BatchedSignal((self.attn @ ps.times.unsqueeze(-1)).squeeze(-1), ss.times)

    def dtw_objective(self, ps, ss, warp_est, reg_wt):
        return -(self.attn * self.sim).sum(-1).mean(-1)


backbones = {
    'GRU': lambda d_in, d_out, n_layers: nn.GRU(d_in, int(d_out / 2), bidirectional=True, num_layers=n_layers, batch_first=True),
    'None': lambda d_in, d_out, n_layers: nn.Identity(d_in)
}


class MusicDTWNet(pl.LightningModule):
    def __init__(self, feature_type: str, loss_fn: str, lr: float, reg_wt: float, optimiser: str = 'adam', out_dim: int = 128,
                 num_layers: int = 2, encoder: str = 'GRU', n_warp_discr: int = 1024, mem_efficient: bool = True, **kwargs):
        super().__init__()
        self.feat_type = feature_type
        feat_dim = {'cqt': 48, 'chroma': 12, 'melspec': 128}
        self.feat_dim = feat_dim[feature_type]
        self.loss_fn = loss_fn
        self.lr = lr
        self.optimiser = optimiser
        self.mem_efficient = mem_efficient
        self.encoder = encoder
        self.backbone_perf = backbones[encoder](self.feat_dim, out_dim, num_layers)
        self.backbone_score = copy.deepcopy(self.backbone_perf)
        self.gdtw = DecDTWLayer()
        self.dtw = self.gdtw
        self.reg_wt = reg_wt
        self.save_hyperparameters()

    def configure_optimizers(self):
        if self.optimiser == 'sgd':
            optimizer = torch.optim.SGD([{'params': self.backbone_perf.parameters()}, {'params': self.backbone_score.parameters()}], lr=self.lr)
        elif self.optimiser == 'adam':
            optimizer = torch.optim.Adam([{'params': self.backbone_perf.parameters()}, {'params': self.backbone_score.parameters()}], lr=self.lr)
        else:
            raise ValueError("invalid optimiser selected, valid choices include 'sgd', 'adam'.")
        return optimizer

    def training_step(self, batch, batch_idx):
        i_b, s_t, p_t, s_f, p_f, l_g, u_g = batch
        s_f, p_f = self._extract_features(batch, batch_idx)
        gt_align = self.trainer.datamodule.train.gt
        with torch.no_grad():
            gt_warps = [self._ground_truth_warp(i, l, u, gt_align, s_t1, p_t1, p_f.device) for
                        i, l, u, s_t1, p_t1 in zip(i_b, l_g, u_g, s_t, p_t)]
        w_t, w_v, dtw_cost = self._predict_warp(s_f, p_f, s_t, p_t, gt_warps)

        time_err = self._time_err(w_t, w_v, gt_warps)
        time_dev = self._time_dev(w_t, w_v, gt_warps)

        self.log('train/time_err', time_err.mean())
        self.log('train/time_dev', time_dev.mean())
        self.log('train/time_err_epoch', time_err.mean(), on_epoch=True, on_step=False)
        self.log('train/time_dev_epoch', time_dev.mean(), on_epoch=True, on_step=False)
        if self.loss_fn == 'time_err':
            loss = time_err
        elif self.loss_fn == 'time_dev':
            loss = time_dev
        else:
            loss = dtw_cost
        self.log('train/loss', loss.mean())
        return loss.mean()

    def validation_step(self, batch, batch_idx):
        i_b, s_t, p_t, s_f, p_f, l_g, u_g = batch
        s_f, p_f = self._extract_features(batch, batch_idx)
        gt_align = self.trainer.datamodule.val.gt
        with torch.no_grad():
            gt_warps = [self._ground_truth_warp(i, l, u, gt_align, s_t1, p_t1, p_f.device) for
                        i, l, u, s_t1, p_t1 in zip(i_b, l_g, u_g, s_t, p_t)]
        w_t, w_v, dtw_cost = self._predict_warp(s_f, p_f, s_t, p_t, gt_warps)

        time_err = self._time_err(w_t, w_v, gt_warps)
        time_dev = self._time_dev(w_t, w_v, gt_warps)

        self.log('val/time_err', time_err.mean())
        self.log('val/time_dev', time_dev.mean())
        if self.loss_fn == 'time_err':
            loss = time_err
        elif self.loss_fn == 'time_dev':
            loss = time_dev
        else:
            loss = dtw_cost
        self.log('val/loss', loss.mean())

    def test_step(self, batch, batch_idx):
        i_b, s_t, p_t, s_f, p_f, l_g, u_g = batch
        s_f, p_f = self._extract_features(batch, batch_idx)
        gt_align = self.trainer.datamodule.test.gt
        with torch.no_grad():
            gt_warps = [self._ground_truth_warp(i, l, u, gt_align, s_t1, p_t1, p_f.device) for
                        i, l, u, s_t1, p_t1 in zip(i_b, l_g, u_g, s_t, p_t)]

        w_t_g, w_v_g, dtw_cost_g = self._predict_gdtw(s_f, p_f, s_t, p_t)
        time_err_g = self._time_err(w_t_g, w_v_g, gt_warps)
        time_dev_g = self._time_dev(w_t_g, w_v_g, gt_warps)

        metrics_full = {'test/time_err_gdtw': time_err_g,
                        'test/time_dev_gdtw': time_dev_g}
        self.log_dict({k: v.mean() for k, v in metrics_full.items()})
        return metrics_full

    def _extract_features(self, batch, batch_idx):
        i, s_t, p_t, s_f, p_f, l_g, u_g = batch
        if self.encoder == 'GRU':
            p_f1 = self.backbone_perf(p_f)[0]
            s_f1 = self.backbone_score(s_f)[0]
            p_f1 = nn.functional.normalize(p_f1, dim=2)
            s_f1 = nn.functional.normalize(s_f1, dim=2)
        else:
            p_f1 = self.backbone_perf(p_f)
            s_f1 = self.backbone_score(s_f)
        return s_f1, p_f1

    def _predict_warp(self, s_f, p_f, s_t, p_t, warp_gt):
        s_t1 = s_t - s_t[:, 0, None]
        p_t1 = p_t - p_t[:, 0, None]
        # aligns score to performance
        if type(self.dtw) is DecDTWLayer:
            return self._predict_gdtw(s_f, p_f, s_t1, p_t1)
        else:
            dtw_cost, w_t, w_v = self.dtw.forward(s_f, p_f, s_t1, p_t1, warp_gt)
            return w_t, w_v, dtw_cost

    def _predict_gdtw(self, s_f, p_f, s_t, p_t):
        ss = BatchedSignal(s_f, times=s_t)
        ps = BatchedSignal(p_f, times=p_t)
        warp_est = self.gdtw.forward(ps, ss, self.reg_wt)
        w_t, w_v = warp_est.times, warp_est.values
        dtw_cost = self.gdtw.dtw_objective(ps, ss, warp_est, self.reg_wt)
        return w_t, w_v, dtw_cost

    def _time_err(self, w_t, w_v, warp_gt):
        warp_pred = BatchedSignal(w_v, times=w_t)
        b, _ = warp_pred.shape
        loss = torch.zeros_like(warp_pred.times.max(dim=1).values)
        for i in range(b):
            gt_times, gt_values = warp_gt[i]
            S = gt_times[-1] - gt_times[0]
            ds = torch.diff(gt_times)
            warp_pred_at_gt = warp_pred[i](gt_times.unsqueeze(0))
            err = gt_values - warp_pred_at_gt.squeeze(0)
            e1, e2 = torch.abs(err[:-1]), torch.abs(err[1:])
            err1 = 0.5 * (e1 + e2)
            err2 = 0.5 * (e1 ** 2 + e2 ** 2) / (e1 + e2)
            sgn = torch.sign(err)
            sgn_eq = sgn[1:] == sgn[:-1]
            err1[~sgn_eq] = 0.
            err2[sgn_eq] = 0.
            dev = err1 + err2
            loss[i] = dev @ ds / S
        return loss

    def _time_dev(self, w_t, w_v, warp_gt):
        warp_pred = BatchedSignal(w_v, times=w_t)
        b, _ = warp_pred.shape
        loss = torch.zeros_like(warp_pred.times.max(dim=1).values)
        for i in range(b):
            gt_times, gt_values = warp_gt[i]
            S = gt_times[-1] - gt_times[0]
            ds = torch.diff(gt_times)
            warp_pred_at_gt = warp_pred[i](gt_times.unsqueeze(0))
            err = gt_values - warp_pred_at_gt.squeeze(0)
            e1, e2 = err[:-1], err[1:]
            se = 1 / 3. * (e1 ** 2 + e1 * e2 + e2 ** 2)
            loss[i] = torch.sqrt(se @ ds / S)
        return loss

    def _ground_truth_warp(self, i, lower, upper, gt_align, score_audio_t, perf_audio_t, device):
        gt_align_slc = gt_align[i][lower:upper].clone().to(device)
        gt_align_slc[:, 0] = gt_align_slc[:, 0] - score_audio_t[0]
        gt_align_slc[:, 1] = gt_align_slc[:, 1] - perf_audio_t[0]
        return gt_align_slc[:, 0], gt_align_slc[:, 1]


class Slices(Dataset):
    def __init__(self, n: int, slice_len: int, feat_dim: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.s_t = torch.cumsum(torch.rand(n, slice_len, generator=g) + 0.1, dim=1)
        self.p_t = torch.cumsum(torch.rand(n, slice_len, generator=g) + 0.1, dim=1)
        self.s_f = torch.rand(n, slice_len, feat_dim, generator=g)
        self.p_f = torch.rand(n, slice_len, feat_dim, generator=g)
        self.gt = [torch.stack([self.s_t[i], self.p_t[i]], dim=1) for i in range(n)]

    def __len__(self):
        return len(self.gt)

    def __getitem__(self, i):
        return i, self.s_t[i], self.p_t[i], self.s_f[i], self.p_f[i], 1, self.s_t.shape[1] - 1


class MusicDM(pl.LightningDataModule):
    def __init__(self, data_dir, feature_type, slice_len, batch_size, seed=0):
        super().__init__()
        self.slice_len, self.batch_size, self.seed = slice_len, batch_size, seed

    def setup(self, stage=None):
        self.train = Slices(12, self.slice_len, 12, self.seed)
        self.val = Slices(4, self.slice_len, 12, self.seed + 1)
        self.test = Slices(4, self.slice_len, 12, self.seed + 2)

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test, batch_size=self.batch_size)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    dm = MusicDM("data", "chroma", 8, 2, seed=1)
    pl.seed_everything(1)
    model = MusicDTWNet(feature_type="chroma", loss_fn="time_err", lr=5e-3, reg_wt=0.05, out_dim=8, num_layers=1,
                        encoder="GRU", n_warp_discr=16)
    monitor = "val/loss"
    checkpoint_callback = ModelCheckpoint(monitor=monitor, mode="min", filename='{epoch:02d}-{val/loss:.4f}')
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", precision=precision, logger=False, log_every_n_steps=10,
                         val_check_interval=0.5, callbacks=[checkpoint_callback], default_root_dir=str(root_dir),
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    fit_metrics = dict(trainer.callback_metrics)
    test = trainer.test(model, datamodule=dm, ckpt_path='best', verbose=False)
    return {"model": model, "trainer": trainer, "val": fit_metrics, "test": test,
            "best": str(Path(checkpoint_callback.best_model_path).relative_to(root_dir)),
            "files": sorted(str(path.relative_to(root_dir)) for path in Path(root_dir).rglob("*.ckpt"))}
