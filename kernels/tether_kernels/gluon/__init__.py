"""Gluon kernels (``triton.experimental.gluon``): explicit wgmma, TMA, mbarriers and warp
specialisation. Imported only where they run (sm90 with a Triton that ships Gluon) or are
compiled ahead of time; importing ``tether_kernels`` never imports them."""
