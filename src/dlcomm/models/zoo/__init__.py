"""dlcomm's own models, one registered :class:`~dlcomm.models.registry.Model` class each, by
family (one module a family). These modules load without torch: each class names its builder
(``"module:function"``), imported when the model is first built."""
