"""A multi-cluster Fleetgate in network namespaces with emulated WAN links (the netns test bed, also
behind `fleetgate demo --netns`). Needs root and iproute2; see docs/testbed.md."""
