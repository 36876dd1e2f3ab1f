"""Task utility: how the service customizes on privatized input and how well it then does.

Owns: :mod:`~rapt_audit.utility.customize` (prompt tuning, prefix tuning, LoRA through ``peft``, and
full fine-tuning, with RAPT's reconstruction head; the model itself in :mod:`~rapt_audit.utility.task_model`),
:mod:`~rapt_audit.utility.customized` (the utility of a text or token-embedding defense under one of those
methods: train, then score), :mod:`~rapt_audit.utility.token_vectors` (a token-embedding release as the
service's input embeddings), :mod:`~rapt_audit.utility.selection`
(the learning rate and epoch chosen on a validation split of the training texts),
:mod:`~rapt_audit.utility.on_device` (training texts tokenized once and kept on the model's device, losses
checked there, the ``precision`` setting), :mod:`~rapt_audit.utility.state_cache` (trained weights stored by
signature), :mod:`~rapt_audit.utility.probes` (the
cheap bag-of-words and logistic-regression probes) and :mod:`~rapt_audit.utility.training` (the one
training loop, used by customization and by the attacks' and defenses' own networks, with the helpers that
keep it free of per-step device synchronisation: ``DeviceSum``, and ``to_device`` from
:mod:`rapt_audit.encoder.encode`).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`.
"""
