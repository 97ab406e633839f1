/*
 * interrupt.c — Ctrl-C as a request to stop, not a kill.
 *
 * The library must never be interrupted in the middle of a step (its
 * handles would be left half-updated), so the handler only records the
 * request; loops in the tool check it between steps and then save.
 */
#include <signal.h>
#include <string.h>

#include "cli.h"

static volatile sig_atomic_t interrupt_flag = 0;

static void on_interrupt(int signo)
{
    interrupt_flag = 1;
    /* a second signal gets the default action: the user insists */
    signal(signo, SIG_DFL);
}

static void catch_once(int signo)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(signo, &sa, NULL);
}

void cli_interrupt_install(void)
{
    interrupt_flag = 0;
    catch_once(SIGINT);
    catch_once(SIGTERM);
}

bool cli_interrupt_requested(void)
{
    return interrupt_flag != 0;
}
