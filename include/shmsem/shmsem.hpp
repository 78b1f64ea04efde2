// shmsem/shmsem.hpp: the umbrella header. Include this to use shmsem.
#pragma once

#include <shmsem/bounded.hpp>
#include <shmsem/errors.hpp>
#include <shmsem/metrics.hpp>
#include <shmsem/observer.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/service.hpp>
#include <shmsem/stats.hpp>
#include <shmsem/version.hpp>
