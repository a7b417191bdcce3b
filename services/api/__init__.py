"""The api service: Conductor's REST API over Cairn's store and bus (`cairn run api`, `cairn dev`)."""
