"""``seqsketch serve``'s request workers: an asyncio front that parses HTTP strictly and holds slow clients
and open streams on its event loop, around the Flask app on a thread pool.

=====================  ==========================================================================
module                 holds
=====================  ==========================================================================
``front``              one connection: requests read whole under limits and timeouts (h11), refused
                       ones answered in JSON, the app run on the pool, its answer written
``streams``            watch streams served on the loop: history on a thread, then the query's
                       hub; ended on client close, server stop, token revocation, watch deletion
``worker``             the gunicorn worker class that runs the front in each worker process
=====================  ==========================================================================
"""
