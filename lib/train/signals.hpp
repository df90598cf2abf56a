// A stop request for long-running loops: SIGINT and SIGTERM set a flag that the loop polls between
// steps, so the current step finishes and the state can be saved before exiting.
#pragma once

namespace meg {

// Installs handlers for SIGINT and SIGTERM that record the request (idempotent).
void install_stop_handlers();
// Whether a stop was requested since the handlers were installed (or since clear_stop_request()).
bool stop_requested();
int stop_signal();  // the signal that asked for the stop, 0 when none
void clear_stop_request();

}  // namespace meg
