"""Device runners: enrolment, credentials, health, device jobs over authenticated HTTP, offline import."""
