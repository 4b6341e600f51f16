"""What several test modules share: the tiny models and the hand-written reference loops, the GAN, checkpoint helpers, the YAML test package and the multi-process worker scripts."""
