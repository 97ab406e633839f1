/*
 * interrupt.c — Ctrl-C as a request to stop, not a kill.
 *
 * The library must never be interrupted in the middle of a step (its
 * handles would be left half-updated), so the handler only records the
 * request; loops in the tool check it between steps and then save.
 */
#include <signal.h>

#include "cli.h"
#include "cli_platform.h"

static volatile sig_atomic_t interrupt_flag = 0;

static void on_interrupt(void)
{
    interrupt_flag = 1;
}

void cli_interrupt_install(void)
{
    interrupt_flag = 0;
    cli_plat_catch_interrupt(on_interrupt);
}

bool cli_interrupt_requested(void)
{
    return interrupt_flag != 0;
}
