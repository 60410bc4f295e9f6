"""The torch runtime measure and trace share: the model builder, the Trainer-order step, the live-storage
tracker and module scopes."""
