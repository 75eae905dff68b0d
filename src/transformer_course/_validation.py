"""Input checks shared by the public API: each raises a TypeError/ValueError naming the argument."""

from __future__ import annotations

import numbers

import torch


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum``, else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise (an int 0/1 is refused: it hides a typo)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return value


def check_probability(name: str, value: object) -> float:
    """Return ``value`` if it is a real number in [0, 1), else raise (used for dropout rates)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_positive_float(name: str, value: object) -> float:
    """Return ``value`` if it is a real number > 0, else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {type(value).__name__}")
    if not float(value) > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return float(value)


def check_tensor(name: str, value: object, ndim: int | tuple[int, ...] | None = None,
                 floating: bool = False) -> torch.Tensor:
    """Return ``value`` if it is a tensor with an allowed number of dimensions, else raise."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if value.dim() not in allowed:
            expected = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {expected} dimensions, got shape {tuple(value.shape)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    return value


def check_features(name: str, value: object, d_model: int, ndim: int | None = None) -> torch.Tensor:
    """Return ``value`` if it is a floating tensor (of ``ndim`` dimensions) whose last dimension is ``d_model``."""
    check_tensor(name, value, ndim=ndim, floating=True)
    if value.dim() == 0 or value.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model}, got shape {tuple(value.shape)}")
    return value


def check_sizes(name: str, values: object) -> tuple[int, ...]:
    """Return ``values`` as a tuple if it is a non-empty list or tuple of ints >= 1, else raise."""
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{name} must be a non-empty list or tuple of ints, got {values!r}")
    return tuple(check_int(name, value, minimum=1) for value in values)


def check_sequence_models(modules: object) -> dict:
    """Return ``modules`` if it is a non-empty dict of name -> ``nn.Module`` with an int ``d_model``."""
    if not isinstance(modules, dict) or not modules:
        raise ValueError(f"modules must be a non-empty dict of name -> module, got {modules!r}")
    for name, module in modules.items():
        if not isinstance(module, torch.nn.Module) or not isinstance(getattr(module, "d_model", None), int):
            raise TypeError(f"modules[{name!r}] must be an nn.Module with an int d_model (its input width)")
    return modules


def check_instance(name: str, value: object, kind: type, description: str | None = None) -> object:
    """Return ``value`` if it is an instance of ``kind``, else raise a TypeError naming ``name``."""
    if not isinstance(value, kind):
        description = description or kind.__name__
        article = "an" if description[0] in "AEIOUaeiou" else "a"
        raise TypeError(f"{name} must be {article} {description}, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value  # type: ignore[return-value]
