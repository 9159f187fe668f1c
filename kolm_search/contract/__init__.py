"""The spec's contract: ``SearchClient``, ``SearchPipeline`` and its stage runner, the ports
and their capability Protocols, options, planners, the guards of what a search takes.

It orchestrates ports and imports no concrete retriever."""
