/* A library built without instrumentation: the collector must refuse it by name. */
int plain_answer(void) { return 42; }
