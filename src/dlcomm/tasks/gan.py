"""``task=gan``: the node-based paper's auxiliary-classifier GAN (``model=acgan``).

One training step updates both networks from the same batch (simultaneous gradient steps), so
that every algorithm's hooks run once per step over both networks' parameters. With real images
``x`` of classes ``y``, noise ``z ~ N(0, I)`` and random classes ``c``, ``x~ = G(z, c)``,
``BCE`` on the validity logit and ``CE`` on the label logits:

    L_D = 1/2 [ 1/2 (BCE(D_v(x), 1) + CE(D_c(x), y)) + 1/2 (BCE(D_v(sg(x~)), 0) + CE(D_c(sg(x~)), c)) ]
    L_G = 1/2 (BCE(D_v^sg(x~), 1) + CE(D_c^sg(x~), c))

where ``sg`` stops the gradient: ``L_D`` does not reach ``G`` (the fakes are detached) and
``L_G`` does not reach ``D`` (it is computed through ``D``'s parameters detached, with
``torch.func.functional_call``). So one backward pass of ``L_D + L_G`` gives ``D`` exactly
``grad L_D`` and ``G`` exactly ``grad L_G``: the two players' gradients of the minimax game
``min_G max_D E log D(x) + E log(1 - D(G(z)))`` (with the non-saturating generator loss), each
then stepped by its own parameter group (``task.generator_lr``, ``task.discriminator_lr``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, cast

from dlcomm.config.schema import ModelConfig, OptimConfig, RunConfig, TaskConfig, domain
from dlcomm.errors import UserError
from dlcomm.models.gan import ACGANConfig
from dlcomm.tasks.base import DataShape, Task
from dlcomm.tasks.registry import register

if TYPE_CHECKING:
    import torch

    from dlcomm.models._gan_layers import AcGan


@dataclass
class GanTaskConfig(TaskConfig):
    """task=gan: the AC-GAN's two players (model=acgan)."""

    name: str = "gan"
    generator_lr: float = field(
        default=0.0,
        metadata=domain(low=0, means="the generator's learning rate (0: optim.lr)"),
    )
    discriminator_lr: float = field(
        default=0.0,
        metadata=domain(low=0, means="the discriminator's learning rate (0: optim.lr)"),
    )
    samples_per_class: int = field(
        default=10,
        metadata=domain(
            low=1, means="the columns of the grid of generated images", doc="one row per class in the logged grid"
        ),
    )


@register
class GanTask(Task):
    Config = GanTaskConfig
    accuracy_label = (
        "discriminator's class accuracy on the test set"  # its auxiliary classifier's, not a generator's quality
    )

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        if cfg.model.name != "acgan":
            raise UserError(
                f"task=gan trains model=acgan (its generator and discriminator), not model={cfg.model.name}: "
                "drop the model= override"
            )

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.knobs: GanTaskConfig = cfg.task  # type: ignore[assignment]
        self.seed = cfg.seed
        self._sums: Dict[str, float] = {"gan_d_loss": 0.0, "gan_g_loss": 0.0}
        self._count = 0

    def build_model(self, model_cfg: ModelConfig, data: DataShape) -> "torch.nn.Module":
        from dlcomm.models.gan import build_acgan

        if not isinstance(model_cfg, ACGANConfig):  # check() refuses another model while composing
            raise TypeError(f"task=gan builds model=acgan, not a {type(model_cfg).__name__}")

        return build_acgan(model_cfg, data.input_shape, data.num_classes, data.pixel_mean, data.pixel_std)

    def param_groups(self, model: "torch.nn.Module", optim_cfg: OptimConfig) -> List[Dict[str, Any]]:
        """One group per network, each with its own learning rate (0: ``optim.lr``)."""
        from dlcomm.models._gan_layers import AcGan

        assert isinstance(model, AcGan)
        lr_g = self.knobs.generator_lr or optim_cfg.lr
        lr_d = self.knobs.discriminator_lr or optim_cfg.lr
        return [
            {"params": list(model.generator.parameters()), "lr": lr_g},
            {"params": list(model.discriminator.parameters()), "lr": lr_d},
        ]

    def loss(self, model: "torch.nn.Module", inputs: "torch.Tensor", labels: "torch.Tensor") -> "torch.Tensor":
        import torch
        import torch.nn.functional as F
        from torch.func import functional_call

        acgan = cast("AcGan", model)  # task=gan trains model=acgan (GanTask.check)
        generator, discriminator = acgan.generator, acgan.discriminator
        batch, device = inputs.shape[0], inputs.device
        classes = discriminator.label.out_features
        noise = torch.randn(batch, generator.latent_dim, device=device)
        fake_labels = torch.randint(0, classes, (batch,), device=device)
        fake = generator(noise, fake_labels)
        ones, zeros = torch.ones(batch, device=device), torch.zeros(batch, device=device)

        real_validity, real_class = discriminator(inputs)
        fake_validity, fake_class = discriminator(fake.detach())
        d_real = 0.5 * (F.binary_cross_entropy_with_logits(real_validity, ones) + F.cross_entropy(real_class, labels))
        d_fake = 0.5 * (
            F.binary_cross_entropy_with_logits(fake_validity, zeros) + F.cross_entropy(fake_class, fake_labels)
        )
        d_loss = 0.5 * (d_real + d_fake)

        fixed = {name: p.detach() for name, p in discriminator.named_parameters()}
        g_validity, g_class = functional_call(discriminator, fixed, (fake,))
        g_loss = 0.5 * (F.binary_cross_entropy_with_logits(g_validity, ones) + F.cross_entropy(g_class, fake_labels))

        self._sums["gan_d_loss"] += float(d_loss.detach())
        self._sums["gan_g_loss"] += float(g_loss.detach())
        self._count += 1
        return d_loss + g_loss

    def take_epoch_losses(self) -> Dict[str, float]:
        """Means of ``L_D`` and ``L_G`` over this rank's steps since the last call."""
        means = {name: total / max(1, self._count) for name, total in self._sums.items()}
        self._sums = dict.fromkeys(self._sums, 0.0)
        self._count = 0
        return means

    def samples(self, model: "torch.nn.Module") -> Dict[str, "torch.Tensor"]:
        """A grid of generated images, one row per class, ``task.samples_per_class`` columns, from
        noise fixed by the run's seed (the same noise at every evaluation); generator in eval mode."""
        import torch
        from torchvision.utils import make_grid

        with torch.no_grad():
            return {
                "samples": make_grid(
                    self._sample_images(model), nrow=self.knobs.samples_per_class, padding=2, pad_value=1.0
                )
            }

    def _sample_images(self, model: "torch.nn.Module") -> "torch.Tensor":
        import torch

        acgan = cast("AcGan", model)  # task=gan trains model=acgan (GanTask.check)
        generator = acgan.generator
        classes = acgan.discriminator.label.out_features
        columns = self.knobs.samples_per_class
        device = next(generator.parameters()).device
        draw = torch.Generator().manual_seed(self.seed)
        noise = torch.randn(classes * columns, generator.latent_dim, generator=draw).to(device)
        labels = torch.arange(classes).repeat_interleave(columns).to(device)
        was_training = generator.training
        generator.eval()
        images = generator.pixels(noise, labels).float().cpu()
        generator.train(was_training)
        return images
