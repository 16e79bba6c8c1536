"""The Hub's bottom layer, no network: its values, ``[[hub]]`` manifest schema, cache layout and scan.

What talks to a Hub sits where its mechanism is: fetching a Hub file through huggingface_hub in
``bake.fetch.hub_download``, adding a Hub repository in ``bake.add.hub_repo`` over the Hub's API
(``bake.add.hub_api``). See docs/architecture.md, "The Hub's homes".
"""
