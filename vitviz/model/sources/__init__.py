"""vitviz.model.sources: what a user names a model by (a file, a torchvision name, a Hub id, the user's own
module), turned into a model. No Qt."""
