//! Spools, fragments and the fragment index.
