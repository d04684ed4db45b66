"""Incremental broker registration (RocketMQ 5's way), the names the broker and the name server
agree on.

A REGISTER_BROKER body whose topic table holds only the topics changed since a version carries
INCREMENT_FIELD: {"baseDataVersion": the version the name server must hold for the changes
to apply, "deletedTopics": names deleted since}. A name server that ignores the field (Apache
RocketMQ's) upserts the changed topics, as it does for RocketMQ 5's incremental registration.
A ferrymq name server holding another version (it restarted, or dropped the broker) applies
nothing and answers SUCCESS with FULL_REQUIRED_FIELD = "true": the broker then sends its
whole table. A body without the field is a full registration (RocketMQ 4's)."""

INCREMENT_FIELD = "ferrymqIncrement"
FULL_REQUIRED_FIELD = "fullRegistrationRequired"
